"""With remote code trusted, deploy.yml stops before anything changes unless the inventory is the root of the trust in
the model's code (issue 24, point 6): a code file the hub serves other than the inventory pins it, a code file the
inventory does not pin, a branch revision, a listing from a mirror nobody said is trusted. The hub is a local server
answering the Hub API's tree and resolve URLs (tests/hub/api_server.py) for a commit with a modeling_kimi.py that
config.json's auto_map names. The runs are in check mode, and what ran is read back: fleet.vllm.fleet_vllm's checks
and vllm_preflight's checks and listing, then the failure; nothing changed."""

from __future__ import annotations

import hashlib
import json
import re
import sys

import pytest

from conftest import ROOT, run_playbook
from tests.hub.api_server import HubApi

pytestmark = pytest.mark.integration

REPO = "acme/kimi-code"
SHA = "a45267417813fc76eec8350af9f643b68aa5d195"
MODELING = b"class KimiModel:\n    pass\n"
EVIL = b"import os\nos.system('id > /tmp/owned')\nclass KimiModel:\n    pass\n"
CONFIG = json.dumps({"architectures": ["KimiModel"], "auto_map": {"AutoModel": "modeling_kimi.KimiModel"}}).encode()

# What may run before the check that stops the run: the shared role's checks, its argument spec, preflight's
# argument spec, input checks and listing - all on the controller, none changing a host.
BEFORE = {"Check that the old names set agree with each other", "Set the new names from the old ones",
          "Check the canary gate's acceptance settings",
          "Remember the model this host serves", "Choose the host that lists this host's model",
          "Take the listing of this host's model from the host that read it",
          "Fail when the host that was to list this host's model failed",
          "Check the type of every variable set for a role of the collection",
          "Check the shared settings that argument specs cannot express",
          "Check the settings that argument specs cannot express",
          "Check that the model's remote code is pinned by the inventory (the settings)",
          "List the files of the model revision", "Fail when the revision's files could not be listed"}


def git_sha1(body):
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


@pytest.fixture
def hub():
    """The commit as the hub lists it, and serves it: modeling_kimi.py is EVIL, not the reviewed MODELING."""
    files = {"config.json": CONFIG, "modeling_kimi.py": EVIL}
    tree = [{"type": "file", "path": path, "size": len(body), "oid": git_sha1(body)} for path, body in sorted(files.items())]
    tree.append({"type": "file", "path": "model-00001-of-00001.safetensors", "size": 4096, "oid": "%040x" % 1,
                 "lfs": {"oid": "%064x" % 1, "size": 4096, "pointerSize": 132}})
    routes = {"/api/models/%s/tree/%s?recursive=true" % (REPO, SHA): (200, tree)}
    routes.update(("/%s/resolve/%s/%s" % (REPO, SHA, path), (200, body)) for path, body in files.items())
    server = HubApi(routes)
    yield server
    server.close()


def deploy(tmp_path, hub, **variables):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[vllm_servers]\ngpu-a ansible_connection=local ansible_python_interpreter=%s ansible_become=false\n"
                         % sys.executable)
    settings = {"fleet_vllm_model_repo": REPO, "fleet_vllm_model_revision": SHA, "fleet_vllm_platform": "cpu",
                "fleet_vllm_hub_endpoint": hub.endpoint, "fleet_vllm_controller_hub_endpoint": hub.endpoint,
                "fleet_vllm_hub_mirror_trusted": True, "fleet_vllm_trust_remote_code": True,
                "fleet_vllm_remote_code_sha256": {"modeling_kimi.py": hashlib.sha256(MODELING).hexdigest()},
                "vllm_server_api_key": "k" * 32, "fleet_vllm_models_root": str(tmp_path / "models"),
                "fleet_vllm_state_dir": str(tmp_path / "state")}
    settings.update(variables)
    run = run_playbook(ROOT / "deploy.yml", "-i", inventory, "--check", extra_vars=settings, timeout=300)
    ran = [task for play in range(len(run.out["plays"])) for task in run.task_list("gpu-a", play)]
    failed = [(name, result) for name, result in ran if result.get("failed")]
    assert run.rc != 0 and len(failed) == 1, run.stdout[-3000:]
    # Nothing but checks and the controller's listing ran before it; nothing changed.
    assert {name for name, dummy in ran if not name.startswith("Validating arguments against arg spec")} - BEFORE \
        <= {failed[0][0]}, ran
    assert run.stats("gpu-a")["changed"] == 0
    return failed[0][0], " ".join(failed[0][1]["msg"].split())


def test_a_code_file_served_other_than_pinned_stops_the_run_naming_both_digests(tmp_path, hub):
    task, message = deploy(tmp_path, hub)
    assert task == "Check the model's code against the inventory's pins"
    assert ("modeling_kimi.py: the listing of %s at %s from %s serves sha256 %s, fleet_vllm_remote_code_sha256 pins %s"
            % (REPO, SHA, hub.endpoint, hashlib.sha256(EVIL).hexdigest(), hashlib.sha256(MODELING).hexdigest())) in message
    # The code and the config were fetched by commit, from the controller's endpoint.
    assert "/%s/resolve/%s/modeling_kimi.py" % (REPO, SHA) in [path for path, dummy in hub.requests]


def test_a_code_file_the_inventory_does_not_pin_stops_the_run(tmp_path, hub):
    task, message = deploy(tmp_path, hub, fleet_vllm_remote_code_sha256={})
    assert task == "Check the model's code against the inventory's pins"
    assert re.search(r"modeling_kimi\.py is code in the listing .* \(sha256 %s\) and fleet_vllm_remote_code_sha256 "
                     r"does not pin it" % hashlib.sha256(EVIL).hexdigest(), message), message


def test_a_branch_with_remote_code_stops_the_run_before_any_request(tmp_path, hub):
    task, message = deploy(tmp_path, hub, fleet_vllm_model_revision="main")
    assert task == "Check that the model's remote code is pinned by the inventory (the settings)"
    assert "fleet_vllm_trust_remote_code is true and fleet_vllm_model_revision is 'main', not a commit sha" in message
    assert hub.requests == []


def test_a_listing_from_a_mirror_nobody_trusts_stops_the_run_before_any_request(tmp_path, hub):
    task, message = deploy(tmp_path, hub, fleet_vllm_hub_mirror_trusted=False)
    assert task == "Check that the model's remote code is pinned by the inventory (the settings)"
    assert ("fleet_vllm_controller_hub_endpoint (%s) is not the Hugging Face Hub (https://huggingface.co)" % hub.endpoint
            in message and "fleet_vllm_hub_mirror_trusted: true" in message), message
    assert hub.requests == []
