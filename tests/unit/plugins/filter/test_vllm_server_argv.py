"""The server command line: engine-argument dicts -> argv (vllm_server_argv), and argv -> a
systemd ExecStart= line (systemd_exec_args) that real systemd splits back into the same argv."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from ansible.errors import AnsibleFilterError
from conftest import prerequisite

from ansible_collections.fleet.vllm.plugins.filter.systemd_exec_args import systemd_exec_args
from ansible_collections.fleet.vllm.plugins.filter.vllm_server_argv import vllm_server_argv

# The role's engine arguments with its defaults (roles/vllm_server/vars/main.yml, rendered).
SEED = {
    "model": "/srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4",
    "tensor_parallel_size": "8", "tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2",
    "enable_auto_tool_choice": True, "trust_remote_code": True, "kv_cache_dtype": None,
    "served_model_name": "nvidia/Kimi-K2.5-NVFP4", "host": "0.0.0.0", "port": "8000",
    "max_model_len": None, "gpu_memory_utilization": None,
}
SEED_ARGV = [
    "--model", "/srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4",
    "--tensor-parallel-size", "8", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
    "--enable-auto-tool-choice", "--trust-remote-code",
    "--served-model-name", "nvidia/Kimi-K2.5-NVFP4", "--host", "0.0.0.0", "--port", "8000",
]


def test_seed_defaults_reproduce_the_seed_flags():
    argv = vllm_server_argv(SEED)
    assert argv == SEED_ARGV
    assert " ".join(argv[2:10]) == ("--tensor-parallel-size 8 --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 "
                                    "--enable-auto-tool-choice --trust-remote-code")
    assert "--disable-log-requests" not in argv


@pytest.mark.parametrize("args, extra, expected", [
    ({"trust_remote_code": True}, None, ["--trust-remote-code"]),
    ({"trust_remote_code": False}, None, []),
    ({"max_model_len": None, "tool_call_parser": ""}, None, []),
    ({"port": 8000, "gpu_memory_utilization": 0.92}, None, ["--port", "8000", "--gpu-memory-utilization", "0.92"]),
    ({"served_model_name": ["kimi", "kimi-k2.5"]}, None, ["--served-model-name", "kimi", "kimi-k2.5"]),
    ({"served_model_name": []}, None, []),
    ({"hf_overrides": {"b": 1, "a": [1, 2]}}, None, ["--hf-overrides", '{"a":[1,2],"b":1}']),
    ({"tensor-parallel-size": 4}, None, ["--tensor-parallel-size", "4"]),
    ({"port": 1}, {"max_num_seqs": 64, "enforce_eager": True, "swap_space": None},
     ["--port", "1", "--max-num-seqs", "64", "--enforce-eager"]),
    ({"port": 1}, ["--max-num-seqs", "64"], ["--port", "1", "--max-num-seqs", "64"]),
])
def test_rendering_table(args, extra, expected):
    assert vllm_server_argv(args, extra=extra) == expected


@pytest.mark.parametrize("extra, words", [
    ({"api_key": "s3cret"}, ["vllm_server_extra_args", "--api-key", "vllm_server_api_key"]),
    (["--hf-token=hf_x"], ["--hf-token", "vllm_server_hf_token"]),
    ({"disable_log_requests": True}, ["--disable-log-requests", "deprecated"]),
    ({"port": 9000}, ["--port", "already sets"]),
    (["--tensor_parallel_size", "2"], ["--tensor-parallel-size", "already sets"]),
    ({"bad flag": 1}, ["vllm_server_extra_args", "bad flag"]),
    ("--enforce-eager", ["vllm_server_extra_args", "a dict"]),
])
def test_bad_extra_args_name_the_variable(extra, words):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"port": 8000, "tensor_parallel_size": 8}, extra=extra)
    assert all(word in str(err.value) for word in words), str(err.value)
    assert "s3cret" not in str(err.value) and "hf_x" not in str(err.value)


# Every spelling vLLM's parser reads as a secret flag (issue 14 point 6): argparse abbreviations,
# "_" for "-", "=value", dotted JSON keys; the value must never reach argv, the unit or ps.
SECRET_SPELLINGS = [
    ["--api-k", "s3cret"], ["--api-ke=s3cret"], ["--api_key", "s3cret"], ["--api_k=s3cret"],
    ["--api-key.x", "s3cret"], ["--API-KEY", "s3cret"], ["--hf-tok", "hf_x"], ["--hf_token=hf_x"],
    ["--hf-t", "hf_x"], ["--hf", "hf_x"], ["--max-num-seqs", "4", "--api-", "s3cret"],
    # the flag is what comes before the first "=" and the first "."
    ["--api-key.x.y", "s3cret"], ["--api-key=s3cret=x"],
]


@pytest.mark.parametrize("extra", SECRET_SPELLINGS)
def test_secret_flags_are_refused_however_spelled(extra):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"port": 8000}, extra=extra)
    message = str(err.value)
    assert "vllm_server_extra_args" in message and ("vllm_server_api_key" in message or "vllm_server_hf_token" in message)
    assert "s3cret" not in message and "hf_x" not in message


@pytest.mark.parametrize("extra", [{"api_k": "s3cret"}, {"hf_tok": "hf_x"}, {"API_KEY": "s3cret"}])
def test_secret_flags_are_refused_as_dict_keys(extra):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"port": 8000}, extra=extra)
    assert "s3cret" not in str(err.value) and "hf_x" not in str(err.value)


@pytest.mark.parametrize("extra", [
    ["--api-server-count", "2"], ["--hf-overrides", "{}"], ["--hf-config-path=/srv/c"], ["--host-x"], ["-tp", "8"],
    ["--allowed-headers", "x-api-key"], ["--", "x"],
])
def test_other_flags_are_not_taken_for_secrets(extra):
    assert vllm_server_argv({}, extra=extra) == extra


@pytest.mark.parametrize("name", ["port\n", "bad flag", "a.b", "x=1", ""])
def test_dict_keys_must_be_whole_flag_names(name):
    """A trailing newline passed a check anchored with "$" (issue 14 point 5)."""
    with pytest.raises(AnsibleFilterError):
        vllm_server_argv({name: "1"})


# systemd.syntax(7) "Quoting" and systemd.service(5) "Command lines", as a splitter for the
# tests: %-specifiers first ("%%" -> "%"), then words split on whitespace, double- or
# single-quoted, C escapes (\\ \" \' \n \t \xNN ...) unescaped; "$$" -> "$" when the command runs.
_ESC = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b",
        "f": "\f", "v": "\v", "s": " "}


def systemd_split(line):
    assert not re.search(r"%[^%]", line.replace("%%", "")), "unescaped specifier in %r" % line
    line = line.replace("%%", "%")
    words, i = [], 0
    while i < len(line):
        if line[i] in " \t":
            i += 1
            continue
        word, quote = [], None
        while i < len(line) and (quote or line[i] not in " \t"):
            c = line[i]
            if c == "\\":
                nxt = line[i + 1]
                if nxt == "x":
                    word.append(chr(int(line[i + 2:i + 4], 16)))
                    i += 4
                    continue
                word.append(_ESC[nxt])
                i += 2
                continue
            if quote and c == quote:
                quote = None
            elif not quote and c in "\"'":
                quote = c
            else:
                word.append(c)
            i += 1
        assert quote is None, "unterminated quote in %r" % line
        words.append("".join(word))
    return [w.replace("$$", "\0").replace("$", "<UNESCAPED $>").replace("\0", "$") for w in words]


ODD = ["a b", 'say "hi"', "it's", "$HOME", "${HOME}x", "100%", "%h", "back\\slash", "tab\there",
       "new\nline", ";", "", "--flag=va lue", "\\x41", "ünïcode", "end\\", "trailing\n", "--x\n",
       "a\rb", "\x7f", "%%", "$$", "'single'"]


@pytest.mark.parametrize("value", ODD)
def test_exec_line_splits_back_to_the_argv(value):
    argv = ["/opt/vllm/current/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--x", value, "--y"]
    line = systemd_exec_args(argv)
    assert systemd_split(line) == argv
    assert "\n" not in line


def test_plain_words_stay_plain():
    assert systemd_exec_args(["/usr/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000",
                              "--host", "0.0.0.0", "--model", "/srv/a-b_c.d:e"]) == (
        "/usr/bin/python -m vllm.entrypoints.openai.api_server --port 8000 --host 0.0.0.0 --model /srv/a-b_c.d:e")


@pytest.mark.parametrize("argv", [[], ["python", "-V"], "/bin/echo hi", ["/bin/echo", "a\0b"]])
def test_exec_line_refuses(argv):
    with pytest.raises(AnsibleFilterError):
        systemd_exec_args(argv)


@prerequisite(shutil.which("systemd-analyze"), reason="systemd-analyze is not installed (Debian: systemd)")
@pytest.mark.parametrize("value", ["a b", 'say "hi"', "it's", "100%", "%h", "back\\slash", "semi;colon", "x$$y"])
def test_real_systemd_reads_the_word_back(tmp_path, value):
    """Real systemd as the oracle: systemd-analyze verify reports the executable of an ExecStart
    line after unquoting, unescaping and specifier expansion. A word made from the value as the
    executable (under a directory that does not exist) must come back exactly ("$" stays "$$"
    there: systemd substitutes variables only when the command runs)."""
    word = "/nonexistent-fleet-vllm/" + value
    unit = tmp_path / "probe.service"
    unit.write_text("[Service]\nExecStart=%s --arg\n" % systemd_exec_args([word]))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    expected = word.replace("$", "$$")
    reported = re.search(r"(?:Executable name contains special characters: |Command )(.*?)(?: is not executable|$)",
                         proc.stderr, re.M)
    assert reported, proc.stderr
    assert reported.group(1) == expected, proc.stderr


@pytest.mark.vllm
def test_real_vllm_parser_accepts_the_seed_argv(vllm_venv, vllm_env):
    """The rendered argv, with extra dict args, parsed by vLLM 0.33's own serve parser."""
    code = r'''
import json, sys
from vllm.entrypoints.common import cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
ns = parser.parse_args(json.loads(sys.argv[1]))
cli_args.validate_parsed_serve_args(ns)
print(json.dumps({k: ns.__dict__.get(k) for k in ("model", "tensor_parallel_size", "tool_call_parser",
      "reasoning_parser", "enable_auto_tool_choice", "trust_remote_code", "served_model_name", "port",
      "max_num_seqs", "hf_overrides", "kv_cache_dtype")}, default=str))
'''
    import json
    argv = vllm_server_argv(dict(SEED, kv_cache_dtype="fp8"),
                            extra={"max_num_seqs": 64, "hf_overrides": {"max_position_embeddings": 1024}})
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), "-c", code, json.dumps(argv)],
                          capture_output=True, text=True, env=vllm_env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ns = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ns["tensor_parallel_size"] == 8 and ns["tool_call_parser"] == "kimi_k2"
    assert ns["reasoning_parser"] == "kimi_k2" and ns["enable_auto_tool_choice"] is True
    assert ns["trust_remote_code"] is True and ns["port"] == 8000 and ns["max_num_seqs"] == 64
    assert ns["kv_cache_dtype"] == "fp8"
    assert "1024" in str(ns["hf_overrides"])


def _secret_spellings():
    """Candidate spellings of each secret flag: every prefix longer than "--", with "_" for "-",
    as "--x VALUE", "--x=VALUE" and "--x.k VALUE", and the single-dash forms."""
    from ansible_collections.fleet.vllm.plugins.filter.vllm_server_argv import SECRET_FLAGS
    spellings = []
    for flag in SECRET_FLAGS:
        for end in range(3, len(flag) + 1):
            for prefix in sorted({flag[:end], "--" + flag[2:end].replace("-", "_")}):
                spellings += [[prefix, "VALUE"], [prefix + "=VALUE"], [prefix + ".k", "VALUE"], ["-" + prefix[2:], "VALUE"]]
    return spellings


@pytest.mark.vllm
def test_refused_spellings_are_the_ones_the_real_parser_reads_as_secrets(vllm_venv, vllm_env):
    """vLLM 0.33's own serve parser as the oracle: every spelling it reads into api_key or
    hf_token is refused, and every refused spelling it does not read so is an error there
    (ambiguous or unknown), so the filter takes nothing away that vLLM would accept."""
    import json
    code = r'''
import contextlib, io, json, sys
from vllm.entrypoints.common import cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
out = []
for argv in json.loads(sys.argv[1]):
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns = parser.parse_args(argv)
    except SystemExit:
        out.append("error")
        continue
    out.append("secret" if "VALUE" in str(ns.api_key) + str(ns.hf_token) else "other")
print(json.dumps(out))
'''
    spellings = _secret_spellings()
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), "-c", code, json.dumps(spellings)],
                          capture_output=True, text=True, env=vllm_env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    read_as_secret, refused_but_fine = [], []
    for argv, outcome in zip(spellings, outcomes):
        try:
            vllm_server_argv({}, extra=argv)
            refused = False
        except AnsibleFilterError:
            refused = True
        if outcome == "secret":
            read_as_secret.append(argv)
            assert refused, "vLLM reads %r as a secret flag, the filter lets it through" % (argv,)
        elif refused:
            refused_but_fine.append(argv)
            assert outcome == "error", "the filter refuses %r, which vLLM parses as another flag" % (argv,)
    # The oracle is not vacuous: abbreviations, "_" and "=" forms are among those vLLM accepts.
    assert ["--api-k", "VALUE"] in read_as_secret and ["--hf_tok=VALUE"] in read_as_secret
    assert ["--api-key.k", "VALUE"] in read_as_secret


# Issue 24 point 12: argparse takes any unambiguous prefix of a long option, so "--hos 0.0.0.0"
# set --host behind the exact-name duplicate guard. Every spelling of a flag the role sets is
# refused, however vLLM would read it: abbreviated, "=value", "_" for "-", a dotted key, a dict key.
ROLE_SPELLINGS = [
    (["--hos", "0.0.0.0"], "--host"), (["--ho", "0.0.0.0"], "--host"), (["--host=0.0.0.0"], "--host"),
    (["--HOST", "::"], "--host"), (["--host.x=0"], "--host"), (["--po", "9000"], "--port"),
    (["--max-num-seqs", "4", "--tensor_parallel", "2"], "--tensor-parallel-size"),
    ({"hos": "0.0.0.0"}, "--host"), ({"ho": "::"}, "--host"), ({"HOST": "0"}, "--host"),
]


@pytest.mark.parametrize("extra, flag", ROLE_SPELLINGS)
def test_a_flag_the_role_sets_is_refused_however_abbreviated(extra, flag):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"host": "127.0.0.1", "port": 8000, "tensor_parallel_size": 8}, extra=extra)
    message = str(err.value)
    assert "vllm_server_extra_args sets %s" % flag in message and "already sets" in message, message
    if flag == "--host":
        assert "vllm_server_host" in message and "vllm_server_allow_non_loopback_host" in message, message


@pytest.mark.parametrize("extra", [["--host-x"], ["--hosts", "a"], ["--port-range=1"], ["--max-num-seqs", "4"], ["-h"]])
def test_a_longer_flag_than_the_roles_is_not_taken_for_it(extra):
    """Only a prefix of a role flag is that flag: --host-x names another option (or none: vLLM says so)."""
    assert vllm_server_argv({"host": "127.0.0.1", "port": 8000}, extra=extra)[4:] == extra


# Issue 24, the next attack on the sink of point 12: vLLM's --config reads a YAML file whose keys set any engine
# argument (FlexibleArgumentParser._pull_args_from_config, 0.16.0 and 0.33.0), where no check of the role sees them.
# Every spelling argparse or vLLM reads as --config is refused, and an argument starting with @ (argparse's
# fromfile_prefix_chars, off in vLLM's parser) too.
CONFIG_SPELLINGS = [
    ["--config", "/etc/vllm/args.yaml"], ["--config=/etc/vllm/args.yaml"], ["--conf", "x.yaml"], ["--con=x.yaml"],
    ["--CONFIG", "x.yaml"], ["--config.port", "9000"], ["--config.host=0.0.0.0"], ["--max-num-seqs", "4", "--config", "x.yml"],
    {"config": "/etc/vllm/args.yaml"}, {"conf": "x.yaml"}, {"CONFIG": "x.yaml"},
]


@pytest.mark.parametrize("extra", CONFIG_SPELLINGS)
def test_config_is_refused_however_spelled(extra):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"host": "127.0.0.1", "port": 8000}, extra=extra)
    message = str(err.value)
    assert message.startswith("vllm_server_extra_args sets --config") and "YAML file" in message, message


@pytest.mark.parametrize("extra", [["@/etc/vllm/args"], ["--max-num-seqs", "4", "@args.txt"]])
def test_an_argument_file_is_refused(extra):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"port": 8000}, extra=extra)
    assert "vllm_server_extra_args has an argument starting with @" in str(err.value)


@pytest.mark.parametrize("extra", [["--config-format", "hf"], {"config_format": "mistral"}, ["--compilation-config", "{}"],
                                   ["--hf-config-path", "/srv/c"], ["--chat-template", "/srv/t@x.jinja"]])
def test_flags_that_only_look_like_config_pass(extra):
    argv = vllm_server_argv({"port": 8000}, extra=extra)
    assert argv[:2] == ["--port", "8000"] and len(argv) > 2


def test_the_media_domains_are_the_roles_own_flag():
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"allowed_media_domains": ["no media URLs"]}, extra=["--allowed-media-dom", "evil.example"])
    message = str(err.value)
    assert "sets --allowed-media-domains (as --allowed-media-dom)" in message and "vllm_server_allowed_media_domains" in message


@pytest.mark.vllm
def test_the_real_parser_reads_config_files_and_the_refused_spellings(vllm_venv, vllm_env, tmp_path):
    """vLLM 0.33's own serve parser as the oracle: --config FILE sets engine arguments from the file (here one the
    role leaves out, --trust-remote-code, and a secret); every spelling it reads as --config is refused; it has no
    fromfile_prefix_chars, so "@FILE" is a plain value there."""
    import json
    config = tmp_path / "args.yaml"
    config.write_text("trust-remote-code: true\napi-key: from-the-file\nmax-num-seqs: 7\n")
    code = r'''
import contextlib, io, json, sys
from vllm.entrypoints.common import cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
out = {"fromfile_prefix_chars": parser.fromfile_prefix_chars, "runs": []}
for argv in json.loads(sys.argv[1]):
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns = parser.parse_args(argv)
    except SystemExit:
        out["runs"].append("error")
        continue
    out["runs"].append({k: ns.__dict__.get(k) for k in ("trust_remote_code", "api_key", "max_num_seqs", "config")})
print(json.dumps(out))
'''
    base = ["--model", "/m", "--host", "127.0.0.1", "--port", "8000"]
    spellings = [["--config", str(config)], ["--config=%s" % config], ["--conf", str(config)], ["--config.x", "1"]]
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), "-c", code, json.dumps([base + s for s in spellings])],
                          capture_output=True, text=True, env=vllm_env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fromfile_prefix_chars"] is None
    loaded = out["runs"][0]
    assert loaded["trust_remote_code"] is True and loaded["api_key"] == ["from-the-file"] and loaded["max_num_seqs"] == 7
    # "--config=FILE" and "--config.x" are --config to argparse (0.33.0 reads the file only after an exact "--config",
    # another build may read it); "--conf" is ambiguous there (--config, --config-format), an error either way.
    assert out["runs"][1]["config"] == str(config) and out["runs"][2] == "error", out
    assert out["runs"][3]["config"] == '{"x": 1}', out
    for spelling in spellings:
        with pytest.raises(AnsibleFilterError):
            vllm_server_argv({"host": "127.0.0.1", "port": 8000}, extra=spelling)


# Issue 24 point 6: the pins of the model's code hold only while the role alone turns remote code on. With
# fleet_vllm_trust_remote_code false the role leaves --trust-remote-code out, and the extra arguments may not
# put it back however spelled (the guard of the role's own flags used to cover only the flags it rendered).
@pytest.mark.parametrize("extra", [
    ["--trust-remote-code"], ["--trust"], ["--trust_remote_code"], ["--TRUST-REMOTE-CODE"], ["--trust-remote-code=true"],
    {"trust_remote_code": True}, {"trust": True},
])
def test_remote_code_cannot_be_turned_on_past_the_role(extra):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"host": "127.0.0.1", "port": 8000, "trust_remote_code": False}, extra=extra)
    message = str(err.value)
    assert "--trust-remote-code" in message and "fleet_vllm_trust_remote_code" in message, message


# Issue 24 point 2: with the engine on its Unix socket the role writes --uds and neither --host nor --port (vLLM
# ignores them beside --uds); an extra argument may still not name any of the three, however spelled: --host and
# --port would put the engine back on a TCP port any local user can take while it is down, and --uds elsewhere
# would move it where the front door's group check does not hold.
@pytest.mark.parametrize("extra, flag", [
    (["--host", "0.0.0.0"], "--host"), (["--hos=::"], "--host"), (["--port", "8000"], "--port"), (["--po", "1"], "--port"),
    (["--uds", "/tmp/x.sock"], "--uds"), (["--ud=/tmp/x.sock"], "--uds"), ({"uds": "/tmp/x.sock"}, "--uds"),
])
def test_the_engines_listener_is_the_roles_alone(extra, flag):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_server_argv({"model": "/m", "uds": "/run/fleet-vllm/vllm/engine.sock"}, extra=extra)
    message = str(err.value)
    assert "vllm_server_extra_args sets %s" % flag in message and "fleet_vllm_engine_socket" in message, message
