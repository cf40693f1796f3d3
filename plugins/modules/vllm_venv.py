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
    (C(nightly-<sha12>), C(pypi-<version>), C(wheelhouse-<version>), C(index-<version>)).
  - When the venv holds a marker file whose pin is this pin, the module reports no change without
    running any installer or touching the network.
  - Otherwise it removes whatever is at that path (a half-finished install), creates the venv with
    O(python), installs vLLM with uv (found on the host, or installed into the venv with pip) or
    with pip, and asks the venv's Python for C(vllm.__version__). When that is not the pinned build
    (the resolver picked another wheel) it removes the venv and fails with both versions.
  - The marker, holding the pin, the version found, the installer and the command, is written only
    after that check passed, so a venv without a marker is never taken as installed.
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
    support: full
    description: Reads the marker and reports whether an install would run and with which command; creates nothing.
  diff_mode:
    support: none
    description: A venv has no useful text diff; RV(cmd) shows what would be installed.
  platform:
    support: full
    platforms: posix
    description: Runs on the host that gets the venv.
options:
  venvs_dir:
    description:
      - The directory holding one venv per pin. Created (mode 0755) when missing.
      - With O(base_dir), it is also given O(owner), O(group) and mode 0755 on every run, like O(base_dir).
    type: path
    required: true
  base_dir:
    description:
      - A directory above O(venvs_dir) (such as C(/opt/vllm) for C(/opt/vllm/venvs)), created when missing and
        given O(owner), O(group) (default root) and mode 0755 on every run, O(venvs_dir) too; reported in
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
    build that installs but cannot be imported fails here too.
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
  description: What identifies the build.
  returned: always
  type: dict
  sample: {"source": "nightly", "commit": "0123456789abcdef0123456789abcdef01234567"}
version:
  description: C(vllm.__version__) of the venv; empty in check mode when an install would run.
  returned: always
  type: str
  sample: 0.16.0rc2.dev313+g0123456789ab
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
"""

import datetime
import grp
import json
import os
import pwd
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._credentials import (
    has_credentials,
    mask_all,
    secrets_in,
)
from ansible_collections.fleet.vllm.plugins.module_utils._managed_files import Failure, ensure_directory
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_runtime import (
    COMMIT_RE,
    VERSION_RE,
    credentials_to_environment,
    expected,
    install_command,
    index_args,
    pin as make_pin,
    venv_key,
    version_matches,
)

PROBE = "import json, vllm; print(json.dumps(vllm.__version__))"
C_ENV = {"LC_ALL": "C", "LANG": "C"}


class Installer(object):
    def __init__(self, module):
        self.module = module
        p = module.params
        self.p = p
        self.key = venv_key(p["source"], p["commit"], p["version"])
        self.pin = make_pin(p["source"], p["commit"], p["version"])
        self.path = os.path.join(p["venvs_dir"], self.key)
        self.python = os.path.join(self.path, "bin", "python")
        self.marker = os.path.join(self.path, p["marker_name"])
        self.result = dict(
            changed=False, key=self.key, path=self.path, python=self.python, pin=self.pin, version="",
            installer="", cmd=[], rebuilt=False, marker=self.marker, changed_directories=[],
            expected=expected(p["source"], p["commit"], p["version"]),
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

    def chown(self):
        owner, group = self.p["owner"], self.p["group"]
        if owner is None and group is None:
            return
        try:
            uid = -1 if owner is None else (int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid)
            gid = -1 if group is None else (int(group) if group.isdigit() else grp.getgrnam(group).gr_gid)
        except KeyError as e:
            self.remove()
            self.fail("unknown owner or group (%s, %s): %s" % (owner, group, to_native(e)))
        for root, dirs, files in os.walk(self.path):
            for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                st = os.lstat(name)
                if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
                    os.lchown(name, uid, gid)

    def write_marker(self, data):
        fd, tmp = tempfile.mkstemp(prefix=".marker.", dir=self.path)
        self.module.add_cleanup_file(tmp)
        with os.fdopen(fd, "w") as f:
            # World-readable: no credential of an index URL goes in.
            f.write(json.dumps(mask_all(data), indent=2, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        self.module.atomic_move(tmp, self.marker)

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
            self.exit("vLLM %s is installed in %s%s" % (data["version"], self.path, moved))

        self.result["changed"] = True
        self.result["rebuilt"] = os.path.lexists(self.path)
        base_python = self.find_python()
        host_uv = self.module.get_bin_path("uv") if p["installer"] in ("auto", "uv") else None
        planned = "pip" if p["installer"] == "pip" else ("uv" if host_uv or p["installer"] == "uv" or p["source"] == "nightly" else "")

        if self.module.check_mode:
            self.result["installer"] = planned
            if planned:
                self.result["cmd"] = self.command(planned, host_uv or "uv")
                self.split_credentials(planned, self.result["cmd"])
            self.exit("would install vLLM (%s) into %s" % (self.result["expected"], self.path))

        try:
            self.remove()
            if not os.path.isdir(p["venvs_dir"]):
                os.makedirs(p["venvs_dir"], 0o755)
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
            elif p["installer"] == "uv" or p["source"] == "nightly":
                self.remove()
                self.fail("uv is needed (%s) but is not on the host's PATH and pip could not install it into the "
                          "venv; the venv %s was removed: %s" % (
                              "the nightly index does not work with plain pip" if p["source"] == "nightly"
                              else "installer=uv", self.path, why))
        argv = self.command(installer, uv)
        self.result.update(installer=installer, cmd=argv)
        bare, environ = self.split_credentials(installer, argv)
        self.run(bare, "installing vLLM with %s" % installer, environ, shown=argv)

        out = self.run([self.python, "-I", "-c", PROBE], "importing vllm in the new venv")
        try:
            found = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            found = None
        if not isinstance(found, str) or not version_matches(p["source"], found, p["commit"], p["version"]):
            self.remove()
            self.fail("the installer put vLLM %s into %s, but the pin asks for %s: the resolver picked another wheel; "
                      "the venv was removed and no link was switched (check the index, the wheelhouse and the "
                      "extra arguments: %s)" % (found, self.path, self.result["expected"], " ".join(argv)),
                      found=found if isinstance(found, str) else to_native(out))
        try:
            self.chown()
        except OSError as e:
            self.remove()
            self.fail("cannot set the owner of %s: %s" % (self.path, to_native(e)))
        self.result["version"] = found
        self.write_marker(dict(
            pin=self.pin, key=self.key, version=found, installer=installer, command=argv,
            installed_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        ))
        self.exit("installed vLLM %s into %s with %s" % (found, self.path, installer))

    def command(self, installer, uv):
        p = self.p
        return install_command(installer, uv, self.python, p["source"], p["commit"], p["version"],
                               p["nightly_index"], p["index_url"], p["wheelhouse"] or "", p["torch_backend"],
                               p["extra_args"])


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
    for text in [module.params["index_url"], module.params["nightly_index"]] + list(module.params["extra_args"]):
        module.no_log_values.update(secrets_in(text))
    Installer(module).apply()


if __name__ == "__main__":
    main()
