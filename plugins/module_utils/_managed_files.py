# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Directories and files with an owner, a group and a mode: fleet.vllm.managed_files makes or mends
them, fleet.vllm.vllm_venv (its directory of venvs) the directories, and fleet.vllm.host_state tells
whether they are already as asked (``out_of_place``), with the same argument spec and the same
comparison, so that a role can skip the write when its look finds everything in place."""

from __future__ import annotations

import grp
import os
import pwd
import stat

from ansible.module_utils.common.text.converters import to_bytes, to_native


class Failure(Exception):
    pass


_OWNER_OPTIONS = dict(owner=dict(type="str", default="root"), group=dict(type="str", default="root"))

# The argument spec of managed_files' directories and files (host_state's managed_directories and
# managed_files): the documentation is the doc fragment fleet.vllm.managed_paths.
DIRECTORIES_SPEC = dict(type="list", elements="dict", default=[], options=dict(
    path=dict(type="path", required=True), mode=dict(type="str", required=True), **_OWNER_OPTIONS))
FILES_SPEC = dict(type="list", elements="dict", default=[], options=dict(
    path=dict(type="path", required=True), content=dict(type="str"),
    secret_content=dict(type="str", no_log=True), src=dict(type="path"), mode=dict(type="str", required=True),
    validate=dict(type="str"), **_OWNER_OPTIONS),
    mutually_exclusive=[("content", "secret_content", "src")],
    required_one_of=[("content", "secret_content", "src")])


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


# The mode of the missing parents the collection creates (root's): what `mkdir -p` gives under the
# usual umask 022. os.makedirs(path, 0o755) gives 0750 under a CIS umask of 027 (mkdir(2) applies the
# umask), and the service user or the peers' rsync daemon cannot get through (docs/evidence.md section 14).
PARENT_MODE = 0o755


def make_parents(path):
    """Create the missing directories above ``path``, each mode 0755 (owner root, as this runs) whatever the
    umask; the ones created, top first. Existing directories are left as they are."""
    missing = []
    parent = os.path.dirname(os.path.normpath(path))
    while parent and parent != os.path.dirname(parent) and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    created = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if os.path.isdir(directory):
                continue  # made by someone else meanwhile: theirs, left as it is
            raise
        os.chmod(directory, PARENT_MODE)
        created.append(directory)
    return created


def ensure_directory(module, item):
    path = item["path"]
    mode = octal(item["mode"], path)
    uid, gid = ids(item["owner"], item["group"], path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not module.check_mode:
            make_parents(path)
            os.mkdir(path, 0o700)
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise Failure("%s exists and is not a directory" % path)
    return fix_attributes(module, path, st, uid, gid, mode)


def wanted_content(item):
    """The bytes a file item must hold (its content, secret_content or the content of its src), or
    None when its src does not exist (yet)."""
    if item["src"] is not None:
        try:
            with open(item["src"], "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Failure("%s: cannot read its source %s: %s" % (item["path"], item["src"], to_native(exc)))
    text = item["secret_content"] if item["secret_content"] is not None else item["content"]
    return to_bytes(text, errors="surrogate_or_strict")


def current_content(path):
    """The lstat and the bytes of an existing regular file, or (None, None) when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise Failure("%s exists and is not a regular file" % path)
    with open(path, "rb") as handle:
        return st, handle.read()


def _attributes_in_place(st, item):
    try:
        uid, gid = ids(item["owner"], item["group"], item["path"])
    except Failure:
        return False  # an account a later task creates: not in place yet
    return (st.st_uid, st.st_gid) == (uid, gid) and stat.S_IMODE(st.st_mode) == octal(item["mode"], item["path"])


def absolute(kind, path):
    """The path, refused unless absolute (kind: 'directories' or 'files')."""
    if not os.path.isabs(path):
        raise Failure("%s: %s is not an absolute path" % (kind, path))
    return path


def out_of_place(directories, files):
    """The paths of ``directories`` and ``files`` (managed_files' items) that managed_files would
    change: missing, another type, another owner, group or mode, or (files) other bytes."""
    found = []
    for item in directories:
        try:
            st = os.lstat(absolute("directories", item["path"]))
        except FileNotFoundError:
            found.append(item["path"])
            continue
        if not stat.S_ISDIR(st.st_mode) or not _attributes_in_place(st, item):
            found.append(item["path"])
    for item in files:
        absolute("files", item["path"])
        try:
            st, current = current_content(item["path"])
        except Failure:  # not a regular file: managed_files would refuse it, which the write will say
            found.append(item["path"])
            continue
        if st is None or current != wanted_content(item) or not _attributes_in_place(st, item):
            found.append(item["path"])
    return found


# What an account needs of an entry on the way to a path (x of each directory above it) and of the path itself.
_NEEDS = dict(way=0o1, directory=0o5, file=0o4)


def _passes(st, uid, gids, need):
    """Whether the mode bits of ``st`` give the account (uid, gids; uid None: an account in none of the owner's
    groups, as a unit's DynamicUser= is to root's files) the permission bits ``need`` (r=4, x=1)."""
    mode = stat.S_IMODE(st.st_mode)
    if uid == 0:
        return True
    if uid is not None and st.st_uid == uid:
        bits = (mode >> 6) & 0o7
    elif st.st_gid in gids:
        bits = (mode >> 3) & 0o7
    else:
        bits = mode & 0o7
    return bits & need == need


def _has_acl(path):
    try:
        return "system.posix_acl_access" in os.listxattr(path, follow_symlinks=False)
    except OSError:
        return False


def _account(user):
    """(uid, gids) of the account named ``user``, or (None, ()) for an account in none of the groups (no name,
    or an account a later task creates)."""
    if not user:
        return None, ()
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None, ()
    gids = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    return entry.pw_uid, gids


def closed_on_the_way(path, user=None):
    """The first entry on the way to ``path`` that the account ``user`` cannot pass (x of each directory above, r of
    a file, r and x of a directory), along the path as given and then along the path its links resolve to; None
    when it can pass everywhere. Only what exists is looked at (what the collection creates later it creates open);
    an entry with a POSIX ACL is taken as passable (its ACL may let the account through: not judged here). The
    answer: {path, mode, owner, group}."""
    uid, gids = _account(user)
    seen = set()
    for way in (os.path.normpath(path), os.path.realpath(path)):
        parts = way.split(os.sep)
        for index in range(2, len(parts) + 1):
            entry = os.sep.join(parts[:index]) or os.sep
            if entry in seen:
                continue
            seen.add(entry)
            try:
                st = os.stat(entry)
            except OSError:
                break  # missing (or a dangling link): nothing further on this way exists
            last = index == len(parts)
            need = _NEEDS["way"] if not last else _NEEDS["directory" if stat.S_ISDIR(st.st_mode) else "file"]
            if not _passes(st, uid, gids, need) and not _has_acl(entry):
                try:
                    owner = pwd.getpwuid(st.st_uid).pw_name
                except KeyError:
                    owner = str(st.st_uid)
                try:
                    group = grp.getgrgid(st.st_gid).gr_name
                except KeyError:
                    group = str(st.st_gid)
                return dict(path=entry, mode="%04o" % stat.S_IMODE(st.st_mode), owner=owner, group=group)
    return None
