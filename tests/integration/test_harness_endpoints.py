"""What the harnesses outside CI ask and probe, held in CI (issue 28): `make test-ee` and
`make demo` ask the roles where each host's front door listens and with what key
(tests/hosts/endpoint.sh -> tests/helpers/endpoints.yml -> fleet.vllm.vllm_gateway's tasks_from
endpoint) and probe it as a client (endpoint_probe). Here the question is asked with the
inventory test-ee builds, its answers are compared with the roles' and the Molecule harness's
constants, and the probe is run, as test-ee runs it, against the role's own front door
configuration in the real HAProxy of this machine, with a stand-in engine behind it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ANSIBLE_BIN, ROOT, free_port, prerequisite, run_playbook
from tests.helpers.haproxy import HAPROXY
from tests.helpers.haproxy import running as haproxy_running
from tests.helpers.standin_engine import StandInEngine

pytestmark = [pytest.mark.integration]

ENDPOINT_SH = ROOT / "tests" / "hosts" / "endpoint.sh"
DEMO_VARS = ROOT / "inventories" / "demo" / "group_vars" / "vllm_servers.yml"
HOSTS = ("fleet-vllm-ee-1", "fleet-vllm-ee-2")


def bash(script, *args):
    """Run SCRIPT with tests/hosts/endpoint.sh sourced, as the harnesses source it."""
    env = {"PATH": "%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" % ANSIBLE_BIN,
           "ANSIBLE_INJECT_FACT_VARS": "false", "HOME": str(Path.home())}
    return subprocess.run(["bash", "-c", '. "$0"; ' + script, str(ENDPOINT_SH), *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300, check=False)


@pytest.fixture(scope="module")
def asked(tmp_path_factory):
    """The project inventory test-ee builds (the demo fleet's group_vars, two hosts reached with
    community.docker.nsenter), and what the roles answer for it."""
    work = tmp_path_factory.mktemp("endpoints")
    inventory = work / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    shutil.copy(DEMO_VARS, inventory / "group_vars" / "vllm_servers.yml")
    hosts = {name: {"ansible_host": name} for name in HOSTS}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {
        "vars": {"ansible_connection": "community.docker.nsenter"}, "hosts": hosts}}}}))
    run = bash('endpoints_ask "$1" "$2"', str(inventory), str(work / "answers"))
    assert run.returncode == 0, run.stdout + run.stderr
    return work / "answers"


def role_default(entry, option):
    specs = yaml.safe_load((ROOT / "roles" / "vllm_gateway" / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return specs[entry]["options"][option]["default"]


def test_the_roles_answer_with_the_inventorys_key_and_model_and_their_own_port(asked):
    demo = yaml.safe_load(DEMO_VARS.read_text())
    for name in HOSTS:
        path = asked / (name + ".json")
        assert oct(path.stat().st_mode & 0o777) == "0o600", "the answer holds the key: only its owner may read it"
        answer = json.loads(path.read_text())
        assert answer["kind"] == "frontdoor"
        assert answer["port"] == role_default("frontdoor", "vllm_gateway_frontdoor_port")
        assert answer["scheme"] == "http"
        assert answer["api_key"] == demo["vllm_server_api_key"]
        assert answer["model"] == demo["vllm_server_served_model_name"]
        assert {"/health", "/v1/chat/completions", "/v1/models"} <= set(answer["paths"])
    # endpoint_field is how the harnesses read it.
    run = bash('endpoint_field "$1" "$2" port; endpoint_field "$1" "$2" paths', str(asked), HOSTS[0])
    assert run.returncode == 0 and run.stdout.split("\n")[0] == str(answer["port"]) and "/v1/models" in run.stdout


def test_the_molecule_harness_publishes_the_port_the_roles_answer(asked):
    """The scenarios' hosts publish the front door's port and fleet_hosts.py probes it: a change of
    the role's port that they did not follow fails here, not first in a scenario."""
    port = json.loads((asked / (HOSTS[0] + ".json")).read_text())["port"]
    fleet_hosts = (ROOT / "molecule" / "shared" / "fleet_hosts.py").read_text()
    assert "FRONTDOOR_PORT = %d\n" % port in fleet_hosts
    for scenario in sorted((ROOT / "molecule").glob("*/molecule.yml")):
        published = [p for platform in yaml.safe_load(scenario.read_text())["platforms"]
                     for p in platform.get("published_ports", [])]
        assert all(p == "127.0.0.1::%d" % port for p in published), (scenario, published)


@pytest.fixture
def front_door(tmp_path, asked):
    """The role's front door configuration (its template and defaults) for the answered key, run by
    this machine's HAProxy on a free loopback port, a stand-in engine behind it."""
    answer = json.loads((asked / (HOSTS[0] + ".json")).read_text())
    engine = StandInEngine(model=answer["model"])
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    run = run_playbook(ROOT / "tests" / "integration" / "playbooks" / "vllm_gateway_render.yml", extra_vars={
        "dest": str(config), "vllm_gateway_api_key": answer["api_key"], "vllm_gateway_engine_port": engine.port,
        "vllm_gateway_frontdoor_port": port, "vllm_gateway_bind_address": "127.0.0.1",
        "vllm_server_served_model_name": answer["model"], "_vllm_gateway_socket": str(tmp_path / "admin.sock")})
    assert run.rc == 0, run.stdout[-3000:]
    try:
        with haproxy_running(config, port):
            yield dict(url="http://127.0.0.1:%d" % port, engine="http://127.0.0.1:%d" % engine.port, **answer)
    finally:
        engine.close()


@prerequisite(HAPROXY, reason="haproxy is not installed (Debian: haproxy; tools/bootstrap.sh installs it)")
@prerequisite(shutil.which("curl"), reason="curl is not installed")
def test_the_probe_test_ee_runs_passes_the_roles_front_door_and_fails_what_is_not_one(front_door):
    probe = 'endpoint_probe "$1" "$2" "$3"'
    good = bash(probe, front_door["url"], front_door["api_key"], front_door["model"])
    assert good.returncode == 0, good.stdout + good.stderr
    # A wrong key: the front door's 401 on /health with it.
    wrong = bash(probe, front_door["url"], front_door["api_key"] + "x", front_door["model"])
    assert wrong.returncode == 1 and "with the key answered 401, not 200" in wrong.stdout
    # The engine itself (what test-ee probed before the front door, port 8000): it asks no key.
    bare = bash(probe, front_door["engine"], front_door["api_key"], front_door["model"])
    assert bare.returncode == 1 and "without the key answered 200, not 401" in bare.stdout
    # Another served name than the one the roles answered.
    other = bash(probe, front_door["url"], front_door["api_key"], "another-model")
    assert other.returncode == 1 and "does not list another-model" in other.stdout
