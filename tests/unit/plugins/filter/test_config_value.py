"""fleet.vllm.config_value: values written into one line of a systemd unit or an rsyncd.conf
(issue 14 point 5). Real systemd reads the unit back in tests/integration/test_vllm_server_role.py,
real rsyncd in tests/integration/test_vllm_weights_peer_daemon.py."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.fleet.vllm.plugins.filter.config_value import config_value


@pytest.mark.parametrize("value, expected", [
    ("nvidia/Kimi-K2.5-NVFP4", "nvidia/Kimi-K2.5-NVFP4"),
    ("kimi 100%", "kimi 100%%"),
    ("%h %n %%", "%%h %%n %%%%"),
    ("$HOME ${X}", "$HOME ${X}"),
    ('say "hi" it\'s', 'say "hi" it\'s'),
    ("back\\slash", "back\\slash"),
    ("ünïcode ☃", "ünïcode ☃"),
    (8000, "8000"),
])
def test_escapes_what_the_formats_expand(value, expected):
    assert config_value(value, variable="v") == expected


@pytest.mark.parametrize("value, words", [
    ("kimi\nExecStartPost=+/bin/sh -c id", ["vllm_x", "a newline"]),
    ("kimi\n", ["vllm_x", "a newline"]),
    ("kimi\rx", ["vllm_x", "a carriage return"]),
    ("kimi\x00", ["vllm_x", "a NUL"]),
    ("ki\tmi", ["vllm_x", "a tab"]),
    ("ki\x1bmi", ["vllm_x", "control character"]),
    ("ki\x7fmi", ["vllm_x", "control character"]),
    ("kimi\\", ["vllm_x", "backslash"]),
    (" kimi", ["vllm_x", "whitespace"]),
    ("kimi ", ["vllm_x", "whitespace"]),
    (None, ["vllm_x"]),
    (["a"], ["vllm_x"]),
])
def test_refuses_what_no_line_can_carry(value, words):
    with pytest.raises(AnsibleFilterError) as err:
        config_value(value, variable="vllm_x")
    assert all(word in str(err.value) for word in words), str(err.value)


@pytest.mark.parametrize("value, expected", [
    ("/srv/models 100%", "/srv/models 100%"), ("/srv/%h/%%", "/srv/%h/%%"), ("/srv/100%home%", "/srv/100%home%"),
    ("/srv/ünï 'q' \"d\" $x", "/srv/ünï 'q' \"d\" $x"),
])
def test_rsyncd_takes_percent_signs_that_name_no_variable_as_they_are(value, expected):
    assert config_value(value, variable="v", syntax="rsyncd") == expected


@pytest.mark.parametrize("value", ["/srv/%HOME%/m", "/srv/%RSYNC_USER_NAME%", "/srv/%H a%"])
def test_rsyncd_refuses_what_it_would_expand(value):
    with pytest.raises(AnsibleFilterError) as err:
        config_value(value, variable="fleet_vllm_pristine_dir", syntax="rsyncd")
    assert "fleet_vllm_pristine_dir" in str(err.value) and "environment variable" in str(err.value)


def test_rsyncd_refuses_line_breaks_too():
    with pytest.raises(AnsibleFilterError):
        config_value("/srv/x\n[root]\npath = /", variable="v", syntax="rsyncd")
