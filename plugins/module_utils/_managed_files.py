# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Directories with an owner, a group and a mode, made or mended in place: fleet.vllm.managed_files
and fleet.vllm.vllm_venv (its directory of venvs) share them."""

from __future__ import annotations

import grp
import os
import pwd
import stat


class Failure(Exception):
    pass


def ids(owner, group, what):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise Failure("%s: no user %s on this host" % (what, owner))
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise Failure("%s: no group %s on this host" % (what, group))
    return uid, gid


def octal(mode, what):
    try:
        value = int(str(mode), 8)
    except ValueError:
        raise Failure("%s: mode %r is not an octal mode such as 0644" % (what, mode))
    if value < 0 or value > 0o7777:
        raise Failure("%s: mode %r is not an octal mode such as 0644" % (what, mode))
    return value


def fix_attributes(module, path, st, uid, gid, mode):
    """Give an existing path (its lstat ``st``) the owner, group and mode asked for; whether it changed."""
    changed = False
    if (st.st_uid, st.st_gid) != (uid, gid):
        changed = True
        if not module.check_mode:
            os.chown(path, uid, gid)
    if stat.S_IMODE(st.st_mode) != mode:
        changed = True
        if not module.check_mode:
            os.chmod(path, mode)
    return changed


def ensure_directory(module, item):
    path = item["path"]
    mode = octal(item["mode"], path)
    uid, gid = ids(item["owner"], item["group"], path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not module.check_mode:
            parent = os.path.dirname(path)
            if parent and not os.path.isdir(parent):
                os.makedirs(parent, 0o755)
            os.mkdir(path, 0o700)
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise Failure("%s exists and is not a directory" % path)
    return fix_attributes(module, path, st, uid, gid, mode)
