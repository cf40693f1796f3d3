"""fleet.vllm.remote_code_problems and remote_code_listing: with remote code trusted the inventory is the root of
the trust in the model's code (issue 24, point 6) - a commit sha, the listing from the Hub unless the mirror is
trusted, every *.py file and every auto_map target pinned, the served content equal to the pin; and the hosts
verify the pinned files against the pin, not against the endpoint's digest."""

from __future__ import annotations

import hashlib
import json

import pytest

from ansible_collections.fleet.vllm.plugins.filter.remote_code_problems import remote_code_listing, remote_code_problems

SHA = "a45267417813fc76eec8350af9f643b68aa5d195"
HUB = "https://huggingface.co"
MIRROR = "http://fleet-vllm-mirror:8090"
MODELING = b"import torch\nclass KimiModel: pass\n"
EVIL = b"import os\nos.system('id > /tmp/owned')\n"
CONFIGURATION = b"class KimiConfig: pass\n"
TOKENIZATION = b"class TikTokenTokenizer: pass\n"


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def revision_files(files, configs=None):
    """What fleet.vllm.hub_revision answers with contents: the tree entries and each fetched file's sha256 and text."""
    configs = configs if configs is not None else {
        "config.json": {"auto_map": {"AutoConfig": "configuration_kimi.KimiConfig",
                                     "AutoModelForCausalLM": "modeling_kimi.KimiModel"}},
        "tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}},
    }
    data = dict(files)
    data.update((name, json.dumps(value).encode()) for name, value in configs.items())
    data["model-00001-of-00001.safetensors"] = b"\0" * 8
    tree = [{"type": "file", "path": path, "size": len(body), "oid": git_sha1(body)} for path, body in sorted(data.items())]
    tree.append({"type": "directory", "path": "docs", "size": 0, "oid": "%040x" % 0})
    contents = dict((path, {"sha256": sha256(body), "text": body.decode("utf-8", "replace")})
                    for path, body in data.items() if path.endswith(".py") or path.endswith("config.json"))
    return {"commit": SHA, "files": tree, "contents": contents}


CODE = {"modeling_kimi.py": MODELING, "configuration_kimi.py": CONFIGURATION, "tokenization_kimi.py": TOKENIZATION}
PINS = dict((path, sha256(body)) for path, body in CODE.items())


def problems(files=None, pins=None, revision=SHA, endpoint=HUB, mirror_trusted=False, trust=True, configs=None):
    listing = revision_files(CODE if files is None else files, configs) if files is not False else None
    return remote_code_problems(listing, trust, PINS if pins is None else pins, revision, endpoint, mirror_trusted,
                                repo="nvidia/Kimi-K2.5-NVFP4")


def test_every_code_file_pinned_and_served_as_pinned_passes():
    assert problems() == []
    # The settings alone (no listing yet) pass too, and a mirror the operator trusts.
    assert problems(files=False) == []
    assert problems(endpoint=MIRROR, mirror_trusted=True) == []


def test_remote_code_not_trusted_checks_nothing():
    assert problems(files=dict(CODE, **{"evil.py": EVIL}), pins={}, revision="main", endpoint=MIRROR, trust=False) == []


# (what is wrong, the arguments, what the message must say)
CASES = [
    ("a *.py file the inventory does not pin", dict(files=dict(CODE, **{"evil.py": EVIL})),
     ["evil.py is code in the listing of nvidia/Kimi-K2.5-NVFP4 at %s from %s (sha256 %s) and "
      "fleet_vllm_remote_code_sha256 does not pin it" % (SHA, HUB, sha256(EVIL))]),
    ("a nested *.py file the inventory does not pin", dict(files=dict(CODE, **{"vision/utils.py": EVIL})),
     ["vision/utils.py is code in the listing", "fleet_vllm_remote_code_sha256 does not pin it"]),
    ("a pinned file served with other content", dict(files=dict(CODE, **{"modeling_kimi.py": EVIL})),
     ["modeling_kimi.py: the listing of nvidia/Kimi-K2.5-NVFP4 at %s from %s serves sha256 %s, "
      "fleet_vllm_remote_code_sha256 pins %s" % (SHA, HUB, sha256(EVIL), sha256(MODELING))]),
    ("an auto_map target the inventory does not pin",
     dict(pins=dict((k, v) for k, v in PINS.items() if k != "tokenization_kimi.py")),
     ["tokenization_kimi.py is code in the listing", "fleet_vllm_remote_code_sha256 does not pin it"]),
    ("an auto_map target the listing does not have (it would be imported if it reached the served directory)",
     dict(configs={"processor_config.json": {"auto_map": {"AutoProcessor": "kimi_processor.KimiProcessor"}}}),
     ["processor_config.json's auto_map AutoProcessor names kimi_processor.py, which is not in the listing",
      "refused with fleet_vllm_trust_remote_code true"]),
    ("an auto_map target in another repository (downloaded at load time, outside any listing)",
     dict(configs={"config.json": {"auto_map": {"AutoModel": "evil/repo--modeling_evil.EvilModel"}}}),
     ["config.json's auto_map AutoModel is evil/repo--modeling_evil.EvilModel, code from another repository"]),
    ("an auto_map of preprocessor_config.json", dict(configs={"preprocessor_config.json": {
        "auto_map": {"AutoImageProcessor": "image_processing_kimi.KimiImageProcessor"}}}),
     ["preprocessor_config.json's auto_map AutoImageProcessor names image_processing_kimi.py, which is not in"]),
    ("a branch revision with remote code", dict(revision="main"),
     ["fleet_vllm_trust_remote_code is true and fleet_vllm_model_revision is 'main', not a commit sha",
      "set fleet_vllm_model_revision to the 40-character commit sha"]),
    ("a short sha", dict(revision=SHA[:12], files=False), ["fleet_vllm_model_revision is '%s', not a commit sha" % SHA[:12]]),
    ("the listing from a mirror nobody said is trusted", dict(endpoint=MIRROR),
     ["fleet_vllm_controller_hub_endpoint (%s) is not the Hugging Face Hub (https://huggingface.co)" % MIRROR,
      "set fleet_vllm_hub_mirror_trusted: true"]),
    ("the mirror reached by another name (a published port): URLs are not compared",
     dict(endpoint="http://127.0.0.1:43121", files=False), ["(http://127.0.0.1:43121) is not the Hugging Face Hub"]),
    ("a look-alike of the Hub over plain http", dict(endpoint="http://huggingface.co", files=False),
     ["is not the Hugging Face Hub"]),
    ("a pin that is not a sha256", dict(pins=dict(PINS, **{"modeling_kimi.py": "REPLACE-with-its-sha256"}), files=False),
     ["fleet_vllm_remote_code_sha256 gives modeling_kimi.py the value 'REPLACE-with-its-sha256'"]),
    ("a pin outside the snapshot", dict(pins=dict(PINS, **{"../etc/x.py": sha256(b"")}), files=False),
     ["fleet_vllm_remote_code_sha256 names '../etc/x.py'"]),
    ("a config file that is not JSON", dict(configs={}, files=dict(CODE, **{"config.json": b"{not json"})),
     ["config.json in the listing of nvidia/Kimi-K2.5-NVFP4 at %s from %s is not JSON" % (SHA, HUB)]),
]


@pytest.mark.parametrize("case,arguments,expected", CASES, ids=[c[0] for c in CASES])
def test_each_problem_stops_the_run_naming_the_file_the_digests_and_the_variable(case, arguments, expected):
    found = problems(**arguments)
    assert found, case
    text = "; ".join(found)
    for part in expected:
        assert part in text, (case, text)


def test_a_pinned_file_that_was_not_fetched_cannot_pass():
    listing = revision_files(CODE)
    del listing["contents"]["modeling_kimi.py"]
    assert any("modeling_kimi.py is code in" in p and "was not fetched" in p
               for p in remote_code_problems(listing, True, PINS, SHA, HUB))


def test_the_mirror_credentials_never_reach_a_message():
    found = problems(endpoint="https://user:secret@mirror.example", files=False)
    assert found and "secret" not in "; ".join(found)


def test_the_hosts_verify_the_pinned_files_against_the_pin():
    listing = [{"path": "modeling_kimi.py", "size": 40, "git_sha1": git_sha1(MODELING)},
               {"path": "config.json", "size": 10, "git_sha1": "%040x" % 7},
               {"path": "model-00001-of-00001.safetensors", "size": 8, "sha256": "%064x" % 9}]
    pinned = remote_code_listing(listing, PINS, True)
    assert pinned[0] == {"path": "modeling_kimi.py", "size": 40, "sha256": PINS["modeling_kimi.py"]}
    assert pinned[1:] == listing[1:]
    # Remote code off, or no pins: the listing as it was.
    assert remote_code_listing(listing, PINS, False) == listing
    assert remote_code_listing(listing, {}, True) == listing
