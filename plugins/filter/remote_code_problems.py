# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: remote_code_problems
short_description: What stops a model's remote code from being trusted, the inventory being the root of that trust
version_added: "0.3.0"
author: fleet.vllm developers (@fleet-vllm)
description:
  - With O(trust_remote_code) false, nothing (an empty list).
  - With O(trust_remote_code) true, the reasons, each naming the variable to set, why the code of the model's
    revision may not run - the engine imports every C(auto_map) target and the C(*.py) files they import
    (transformers' C(dynamic_module_utils)), so the inventory must say which code that is, and a listing an endpoint
    answers must not be able to change it.
  - O(revision) must be a 40-character commit sha (a branch moves; a tag can be moved).
  - O(endpoint), where the controller lists the commit, must be the Hugging Face Hub (C(https://huggingface.co)),
    unless O(mirror_trusted) - the URL of a site mirror is not compared with the hosts' one, since the controller
    often reaches the same mirror by another name (a published port).
  - Every value of O(pins) is a sha256 (64 hexadecimal digits) keyed by a relative path.
  - With the commit's listing (O(_input), M(fleet.vllm.hub_revision#lookup) called with C(contents) for the C(*.py)
    files and O(config_files)), every C(*.py) file of it is pinned and the sha256 of what the endpoint served is the
    pin; every C(auto_map) target of the configuration files (C(module.Class) is C(module.py) at the root of the
    snapshot) is a listed, pinned file; a target in another repository (C(owner/name--module.Class), which
    transformers downloads at load time, outside any listing) is refused.
  - Without the listing (O(_input) null), only the checks of the settings (revision, endpoint, pins' form).
options:
  _input:
    description: The answer of M(fleet.vllm.hub_revision#lookup) (C(files), C(contents)), or null for the settings only.
    type: raw
    required: true
  trust_remote_code:
    description: Whether the engine runs the model's code (C(fleet_vllm_trust_remote_code)).
    type: bool
    required: true
  pins:
    description: The sha256 of each code file, by its path in the snapshot (C(fleet_vllm_remote_code_sha256)).
    type: dict
    required: true
  revision:
    description: The model's revision (C(fleet_vllm_model_revision)).
    type: str
    required: true
  endpoint:
    description: Where the controller lists the commit.
    type: str
    required: true
  mirror_trusted:
    description: The operator trusts O(endpoint) to vouch for its own files (C(fleet_vllm_hub_mirror_trusted)).
    type: bool
    default: false
  endpoint_variable:
    description: The variable O(endpoint) comes from, for the messages.
    type: str
    default: fleet_vllm_controller_hub_endpoint
  repo:
    description: The model repository, for the messages.
    type: str
    default: the model
  config_files:
    description: The files whose C(auto_map) names code (transformers 5.20.2 reads these five).
    type: list
    elements: str
    default: [config.json, tokenizer_config.json, processor_config.json, preprocessor_config.json,
              video_preprocessor_config.json]
"""

EXAMPLES = r"""
- name: Refuse remote code the inventory has not pinned
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('; ') }}"
  vars:
    __problems: >-
      {{ __revision_files | fleet.vllm.remote_code_problems(fleet_vllm_trust_remote_code, fleet_vllm_remote_code_sha256,
         fleet_vllm_model_revision, fleet_vllm_controller_hub_endpoint, fleet_vllm_hub_mirror_trusted) }}
"""

RETURN = r"""
_value:
  description: One message per problem, each naming the file, the digests and the variable to set; empty when none.
  type: list
  elements: str
"""

import json
import re

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import mask_credentials, origin

COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# The Hugging Face Hub, as (scheme, host, port).
HUB_ORIGIN = ("https", "huggingface.co", 443)
HUB_URL = "https://huggingface.co"
CONFIG_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                "video_preprocessor_config.json")
TRUST = "fleet_vllm_trust_remote_code"
PINS = "fleet_vllm_remote_code_sha256"
REVISION = "fleet_vllm_model_revision"
MIRROR = "fleet_vllm_hub_mirror_trusted"


def _references(value):
    """The class references of one auto_map value: a string, or a list of them (AutoTokenizer's [slow, fast],
    where either may be null)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


def _settings_problems(pins, revision, endpoint, mirror_trusted, endpoint_variable):
    problems = []
    if not isinstance(revision, str) or not COMMIT_RE.match(revision):
        problems.append("%s is true and %s is '%s', not a commit sha: a branch moves, and a tag can be moved, to code "
                        "nobody reviewed; set %s to the 40-character commit sha whose code you reviewed and pinned in %s, "
                        "or set %s: false" % (TRUST, REVISION, revision, REVISION, PINS, TRUST))
    if not mirror_trusted and origin(endpoint) != HUB_ORIGIN:
        problems.append("%s is true and %s (%s) is not the Hugging Face Hub (%s): the listing that vouches for the "
                        "model's files would come from a mirror, which can answer any tree for any commit; list from the "
                        "Hub (set %s: %s), or, for a site mirror you trust as much as the Hub, set %s: true (the code "
                        "files stay bound to %s)"
                        % (TRUST, endpoint_variable, mask_credentials(str(endpoint)), HUB_URL, endpoint_variable,
                           HUB_URL, MIRROR, PINS))
    if not isinstance(pins, dict):
        problems.append("%s must be a dictionary of file path: sha256, got %s" % (PINS, type(pins).__name__))
    else:
        for path in sorted(pins, key=str):
            digest = pins[path]
            if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
                problems.append("%s names %r: give each file by its path in the snapshot, such as modeling_deepseek.py"
                                % (PINS, path))
            elif not isinstance(digest, str) or not SHA256_RE.match(digest):
                problems.append("%s gives %s the value '%s': set the sha256 of the file's content, 64 lowercase "
                                "hexadecimal digits (sha256sum %s)" % (PINS, path, digest, path))
    return problems


def remote_code_problems(revision_files, trust_remote_code, pins, revision, endpoint, mirror_trusted=False,
                         endpoint_variable="fleet_vllm_controller_hub_endpoint", repo="the model", config_files=None):
    """See DOCUMENTATION."""
    if not trust_remote_code:
        return []
    problems = _settings_problems(pins, revision, endpoint, mirror_trusted, endpoint_variable)
    if revision_files is None or problems:
        return problems
    files = revision_files.get("files") or []
    contents = revision_files.get("contents") or {}
    listed = set(entry.get("path") for entry in files if isinstance(entry, dict) and entry.get("type") == "file")
    where = "the listing of %s at %s from %s" % (repo, revision, mask_credentials(str(endpoint)))
    for path in sorted(p for p in listed if isinstance(p, str) and p.endswith(".py")):
        served = (contents.get(path) or {}).get("sha256")
        if path not in pins:
            problems.append("%s is code in %s (sha256 %s) and %s does not pin it: review it, then add %s: <its sha256> "
                            "to %s" % (path, where, served or "not fetched", PINS, path, PINS))
        elif served is None:
            problems.append("%s is code in %s and was not fetched: its sha256 cannot be compared with %s's" % (path, where, PINS))
        elif served != pins[path]:
            problems.append("%s: %s serves sha256 %s, %s pins %s: the code differs from the one you reviewed; find out "
                            "why before you change the pin" % (path, where, served, PINS, pins[path]))
    for name in (config_files or CONFIG_FILES):
        if name not in listed:
            continue
        if name not in contents:
            problems.append("%s is in %s and was not fetched: the code its auto_map names cannot be checked" % (name, where))
            continue
        try:
            config = json.loads(contents[name].get("text") or "")
        except ValueError:
            problems.append("%s in %s is not JSON: the code its auto_map names cannot be checked" % (name, where))
            continue
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        if not isinstance(auto_map, dict):
            continue
        for key in sorted(auto_map):
            for reference in _references(auto_map[key]):
                if "--" in reference:
                    problems.append("%s's auto_map %s is %s, code from another repository, which the engine would "
                                    "download at load time, outside the listing and %s: refused with %s true"
                                    % (name, key, reference, PINS, TRUST))
                    continue
                parts = reference.split(".")
                if len(parts) != 2 or not parts[0]:
                    problems.append("%s's auto_map %s is %r, not module.Class: transformers cannot load it"
                                    % (name, key, reference))
                    continue
                module = parts[0] + ".py"
                if module not in listed:
                    problems.append("%s's auto_map %s names %s, which is not in %s: refused with %s true (%s pins "
                                    "only listed files, and only listed files are served)"
                                    % (name, key, module, where, TRUST, PINS))
                # A listed target is a *.py file of the listing: pinned and compared above.
    return problems


def remote_code_listing(listing, pins, trust_remote_code=True):
    """fleet.vllm.weights_listing's listing with the pinned files checked by their pin: the sha256 the inventory gives
    replaces the digest the endpoint listed, so what the hosts verify a code file against is the inventory's word."""
    if not trust_remote_code or not pins:
        return listing
    result = []
    for entry in listing:
        if isinstance(entry, dict) and entry.get("path") in pins:
            entry = dict((key, value) for key, value in entry.items() if key not in ("sha256", "git_sha1"))
            entry["sha256"] = pins[entry["path"]]
        result.append(entry)
    return result


class FilterModule(object):
    def filters(self):
        return dict(remote_code_problems=remote_code_problems, remote_code_listing=remote_code_listing)
