"""group_link: the head's listener and a member's connection (issue 26, roles/vllm_preflight/tasks/group.yml), on
real sockets on loopback; the ports are the system's free ones."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.fleet.vllm.plugins.modules import group_link  # noqa: E402

sys.path.pop(0)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_head_hears_each_member_from_its_own_address_and_the_member_connects():
    port = free_port()
    heard = {}
    listener = threading.Thread(target=lambda: heard.update(group_link.listen("127.0.0.1", port, ["127.0.0.2", "127.0.0.3"], 10)))
    listener.start()
    # Two members, each from its own loopback address (127.0.0.0/8 is all this host's).
    assert group_link.connect("127.0.0.1", port, "127.0.0.2", 10) == {"connected": True, "error": None}
    assert group_link.connect("127.0.0.1", port, "127.0.0.3", 10)["connected"] is True
    listener.join(15)
    assert heard == {"in_use": False, "seen": ["127.0.0.2", "127.0.0.3"], "missing": []}


def test_a_member_that_never_connects_is_missing_after_the_bound():
    port = free_port()
    result = group_link.listen("127.0.0.1", port, ["127.0.0.2", "127.0.0.9"], 1)
    assert result == {"in_use": False, "seen": [], "missing": ["127.0.0.2", "127.0.0.9"]}


def test_a_port_the_engine_holds_is_in_use_and_not_listened_on():
    with socket.socket() as engine:
        engine.bind(("127.0.0.1", 0))
        engine.listen(1)
        port = engine.getsockname()[1]
        assert group_link.listen("127.0.0.1", port, ["127.0.0.2"], 5) == {"in_use": True, "seen": [], "missing": []}
        # The members then reach the engine itself.
        assert group_link.connect("127.0.0.1", port, "127.0.0.2", 5)["connected"] is True


def test_a_connection_that_cannot_be_made_says_why_after_its_bound():
    port = free_port()
    result = group_link.connect("127.0.0.1", port, "127.0.0.2", 1)
    assert result["connected"] is False
    assert result["error"].startswith("127.0.0.1:%d from 127.0.0.2: " % port) and "refused" in result["error"].lower()
    # An address that is not this host's cannot be the source.
    result = group_link.connect("127.0.0.1", port, "192.0.2.7", 1)
    assert result["connected"] is False and "192.0.2.7" in result["error"]


def test_an_ipv4_mapped_peer_is_its_ipv4_address():
    assert group_link._canonical("::ffff:10.0.3.12") == "10.0.3.12"
    assert group_link._canonical("fe80::1%eth0") == "fe80::1"
    assert group_link._canonical("10.0.3.12") == "10.0.3.12"
