# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several vLLM engine instances on one machine, as fleet.vllm.preflight checks them (issue 26 point 3).

An instance is an engine of its own (unit ``vllm.service``, or ``vllm@NAME.service``) with its GPUs
(``CUDA_VISIBLE_DEVICES``, by UUID), a block of internal ports (vLLM's ``VLLM_PORT``: vLLM 0.33.0's
``vllm/utils/network_utils.py`` ``_get_open_port``/``get_open_ports_list`` bind ``("", port)`` from it upward
until a port is free) and its API, front-door and metrics ports. These functions read what the machine
has - the GPUs ``nvidia-smi -L`` lists (MIG devices with their parent GPU), the TCP listeners of
``/proc/net/tcp`` and ``tcp6`` with the process and systemd unit that hold each, the kernel's ephemeral
port range, the other engine units and their environment - and say what conflicts. Every root
(procfs, the units' directory) is a parameter, so that tests point them at a fake tree.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import errno
import glob
import ipaddress
import os
import re

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import _unique
from ansible_collections.fleet.vllm.plugins.module_utils._pci_sysfs import read_text

_UUID_TAIL = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
GPU_UUID = re.compile(r"GPU-" + _UUID_TAIL)
MIG_UUID = re.compile(r"MIG-" + _UUID_TAIL)
UUID_SHAPE = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

# nvidia-smi -L: "GPU 0: NAME (UUID: GPU-...)", then, for a GPU in MIG mode, one line per MIG device:
# "  MIG 1g.24gb     Device  0: (UUID: MIG-...)" (NVIDIA's MIG User Guide, "Getting Started with MIG").
_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)\s]+)\)\s*$")
_PROFILE_GB = re.compile(r"(?:^|\.)(\d+)gb(?:$|\+)", re.IGNORECASE)

GB = 1000 ** 3
MIB = 1024 ** 2

TCP_LISTEN = "0A"
_SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$")
_UNIT_SUFFIXES = (".service", ".socket", ".scope")
ENGINE_UNIT = re.compile(r"^vllm(@[^/@]+)?\.service$")


def key(uuid):
    return (uuid or "").strip().lower()


# ---------------------------------------------------------------------------- GPUs


def gpu_input_error(gpus, variable):
    """Why the instance's GPU list cannot be taken (an index, not a UUID, a GPU twice), or None."""
    seen = set()
    for entry in gpus:
        text = "%s" % (entry,)
        if text.strip().isdigit():
            return ("%s has %s, a GPU index: list the instance's GPUs by the UUIDs `nvidia-smi -L` prints (GPU-... for a "
                    "GPU, MIG-... for a MIG device); an index names another GPU after a reboot or a driver change"
                    % (variable, text.strip()))
        if not (GPU_UUID.fullmatch(text) or MIG_UUID.fullmatch(text)):
            return ("%s has %r, which is not a GPU UUID (%s) nor a MIG device UUID (MIG- and the same shape): list the "
                    "instance's GPUs by the UUIDs `nvidia-smi -L` prints; an index names another GPU after a reboot or "
                    "a driver change" % (variable, text, UUID_SHAPE))
        if key(text) in seen:
            return "%s lists %s twice: list each of the instance's GPUs once" % (variable, text)
        seen.add(key(text))
    return None


def is_mig(uuid):
    return key(uuid).startswith("mig-")


def parse_list_gpus(text):
    """``nvidia-smi -L`` -> [dict(index, name, uuid, migs=[dict(profile, device, uuid)])]; lines of
    another shape are skipped."""
    gpus = []
    for line in (text or "").splitlines():
        match = _LIST_GPU.match(line)
        if match:
            gpus.append(dict(index=int(match.group(1)), name=match.group(2), uuid=match.group(3), migs=[]))
            continue
        match = _LIST_MIG.match(line)
        if match and gpus:
            gpus[-1]["migs"].append(dict(profile=match.group(1), device=int(match.group(2)), uuid=match.group(3)))
    return gpus


def mig_memory_mib(profile):
    """The memory of a MIG profile such as ``1g.24gb`` (``NNgb``: NN x 10^9 bytes) in MiB, or None."""
    match = _PROFILE_GB.search(profile or "")
    return int(match.group(1)) * GB // MIB if match else None


def mig_parents(listing):
    """{MIG UUID (lower case): (the parent GPU of parse_list_gpus, the MIG device)}."""
    return dict((key(mig["uuid"]), (gpu, mig)) for gpu in listing or [] for mig in gpu["migs"])


def select_gpus(gpu_info, wanted, listing, variable):
    """The instance's view of ``gpu_info`` and the problems of its GPU list ``wanted`` (UUIDs).

    ``listing`` is parse_list_gpus's (needed for MIG devices only; None when not read). The view keeps
    gpu_info's shape, with the GPUs found (a MIG device as one entry with its parent's fields) and
    the topology restricted to them."""
    host = gpu_info.get("gpus") or []
    by_uuid = dict((key(gpu.get("uuid")), gpu) for gpu in host if gpu.get("uuid"))
    migs = mig_parents(listing)
    problems = []
    chosen, unknown_gpus, unknown_migs = [], [], []
    for uuid in wanted:
        if is_mig(uuid):
            if key(uuid) in migs:
                chosen.append(mig_entry(host, by_uuid, *migs[key(uuid)]))
            else:
                unknown_migs.append(uuid)
        elif key(uuid) in by_uuid:
            chosen.append(dict(by_uuid[key(uuid)]))
        else:
            unknown_gpus.append(uuid)

    if unknown_gpus:
        problems.append(
            "%s has %s, not among the GPUs of this host (%s): list the UUIDs `nvidia-smi -L` prints on this host"
            % (variable, ", ".join(unknown_gpus),
               ", ".join("GPU %s %s" % (gpu.get("index"), gpu.get("uuid")) for gpu in host) or "none"))
    if unknown_migs and listing is not None:  # None: `nvidia-smi -L` failed, and the caller said so
        known = ["%s (%s on GPU %d)" % (mig["uuid"], mig["profile"], gpu["index"]) for gpu in listing or [] for mig in gpu["migs"]]
        problems.append(
            "%s has MIG device %s, which `nvidia-smi -L` does not list on this host (its MIG devices: %s): list one it "
            "lists, or create it (nvidia-smi mig -cgi PROFILE -C)"
            % (variable, ", ".join(unknown_migs), ", ".join(known) or "none, MIG is off on every GPU"))
    mig_wanted = [uuid for uuid in wanted if is_mig(uuid)]
    gpu_wanted = [uuid for uuid in wanted if not is_mig(uuid)]
    if len(mig_wanted) > 1:
        problems.append(
            "%s has %d MIG devices (%s): CUDA enumerates a single MIG device per process (NVIDIA's MIG User Guide, "
            "\"CUDA Device Enumeration\"), so the engine would see one of them: give the instance one MIG device, or "
            "whole GPUs" % (variable, len(mig_wanted), ", ".join(mig_wanted)))
    if mig_wanted and gpu_wanted:
        problems.append(
            "%s mixes MIG devices (%s) with whole GPUs (%s): CUDA enumerates a single MIG device per process (NVIDIA's "
            "MIG User Guide, \"CUDA Device Enumeration\"): list either whole GPUs or one MIG device"
            % (variable, ", ".join(mig_wanted), ", ".join(gpu_wanted)))
    return instance_view(gpu_info, chosen), problems


def mig_entry(host, by_uuid, parent, mig):
    """A MIG device as a gpu_info GPU: its parent's fields, its name and profile, its memory and UUID."""
    gpu = by_uuid.get(key(parent["uuid"]))
    if gpu is None:
        gpu = next((g for g in host if g.get("index") == parent["index"]), None)
    entry = dict(gpu) if gpu else dict(index=parent["index"], name=parent["name"])
    name = entry.get("name") or parent["name"]
    entry.update(
        name="%s MIG %s" % (name, mig["profile"]),
        uuid=mig["uuid"],
        memory_total_mib=mig_memory_mib(mig["profile"]),
        mig_profile=mig["profile"],
        parent_uuid=parent["uuid"],
    )
    return entry


def instance_view(gpu_info, chosen):
    """gpu_info with only the ``chosen`` GPUs (gpu_info entries), the summaries and topology recomputed."""
    whole = sorted((gpu for gpu in chosen if not gpu.get("mig_profile")), key=lambda gpu: gpu.get("index"))
    entries = whole + [gpu for gpu in chosen if gpu.get("mig_profile")]
    view = dict(gpu_info)
    models = _unique(gpu.get("name") for gpu in entries)
    memory = [gpu.get("memory_total_mib") for gpu in entries if isinstance(gpu.get("memory_total_mib"), int)]
    view.update(
        count=len(entries),
        gpus=entries,
        models=models,
        model=models[0] if len(models) == 1 else None,
        compute_capabilities=_unique(gpu.get("compute_capability") for gpu in entries if gpu.get("compute_capability")),
        memory_total_mib_min=min(memory) if memory else None,
    )
    topology = gpu_info.get("topology")
    if isinstance(topology, dict):
        indexes = set(gpu.get("index") for gpu in whole)
        pairs = [pair for pair in topology.get("pairs") or []
                 if len(pair.get("gpus") or []) == 2 and set(pair["gpus"]) <= indexes]
        labels = set("GPU%s" % index for index in indexes)
        matrix = dict((row, dict((col, code) for col, code in links.items() if not col.startswith("GPU") or col in labels))
                      for row, links in (topology.get("matrix") or {}).items()
                      if not row.startswith("GPU") or row in labels)
        view["topology"] = dict(topology, pairs=pairs, link_types=sorted(set(pair.get("link") for pair in pairs)),
                                matrix=matrix)
        nvlink = [pair for pair in pairs if pair.get("type") == "nvlink"]
        view["pcie_only"] = not nvlink
        view["interconnect"] = "none" if not pairs else "nvlink" if len(nvlink) == len(pairs) else "pcie"
    return view


# ---------------------------------------------------------------------------- listening ports


def _address(hexed, family):
    raw = bytes.fromhex(hexed)
    if family == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # four 32-bit words, each in the host's (little-endian) byte order
    return str(ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))


def tcp_listeners(proc_root):
    """The listening TCP sockets of <proc_root>/net/tcp and tcp6: [dict(port, address, inode)]."""
    found = []
    for name, family in (("tcp", 4), ("tcp6", 6)):
        text = read_text(os.path.join(proc_root, "net", name)) or ""
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != TCP_LISTEN:
                continue
            hexed, sep, port = fields[1].rpartition(":")
            try:
                found.append(dict(port=int(port, 16), address=_address(hexed, family), inode=int(fields[9])))
            except ValueError:
                continue
    return found


def socket_owners(proc_root, inodes):
    """({socket inode: [pid, ...]}, how many processes' descriptors could not be read), scanning the
    ``socket:[INODE]`` links of <proc_root>/PID/fd."""
    wanted = set(inodes)
    owners, denied = {}, 0
    if not wanted:
        return owners, denied
    try:
        pids = sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return owners, denied
    for pid in pids:
        fd_dir = os.path.join(proc_root, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                denied += 1
            continue
        for fd in fds:
            try:
                match = _SOCKET_LINK.match(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue
            if match and int(match.group(1)) in wanted:
                holders = owners.setdefault(int(match.group(1)), [])
                if pid not in holders:
                    holders.append(pid)
    return owners, denied


def cgroup_unit(text):
    """The systemd unit of a process from its /proc/PID/cgroup: the ``name=systemd`` hierarchy
    (cgroup v1 and hybrid), else the unified one (``0::``); the last path component that ends in
    .service, .socket or .scope. None when there is none."""
    path = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "name=systemd" in parts[1].split(","):
            path = parts[2]
            break
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            path = parts[2]
    if path is None:
        return None
    units = [part for part in path.strip().split("/") if part.endswith(_UNIT_SUFFIXES)]
    return units[-1] if units else None


def process(proc_root, pid):
    """dict(pid, comm, unit) of a process."""
    comm = read_text(os.path.join(proc_root, str(pid), "comm"))
    return dict(pid=pid, comm=comm.strip() if comm else None,
                unit=cgroup_unit(read_text(os.path.join(proc_root, str(pid), "cgroup"))))


def port_range(text):
    """(low, high) of ip_local_port_range's text, or None."""
    parts = (text or "").split()
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        return None
    return int(parts[0]), int(parts[1])


def reserved_ports(text):
    """The ports of ip_local_reserved_ports' text ("8080,9000-9010"), as a set."""
    ports = set()
    for item in (text or "").strip().split(","):
        low, sep, high = item.strip().partition("-")
        if low.isdigit() and (not sep or high.isdigit()):
            ports.update(range(int(low), int(high if sep else low) + 1))
    return ports


def port_input_error(ports, block):
    """Why the ports or the block cannot be taken, or None. ``ports``: [dict(name, port)];
    ``block``: dict(name, start, size) (start 0: no block)."""
    for entry in ports:
        if not 1 <= entry["port"] <= 65535:
            return "%s is %d: a TCP port is 1 to 65535" % (entry["name"], entry["port"])
    if block and block["start"]:
        last = block["start"] + block["size"] - 1
        if block["size"] < 1 or block["start"] < 1024 or last > 65535:
            return ("%s is %d with a block of %d ports (to %d): the block of the instance's internal ports must lie "
                    "within 1024-65535, with 1 port or more" % (block["name"], block["start"], block["size"], last))
    return None


def block_text(block):
    return "%s=%d, ports %d-%d" % (block["name"], block["start"], block["start"], block["start"] + block["size"] - 1)


def port_findings(proc_root, ports, block, own_units):
    """(measured, problems) of the instance's ports and internal port block on this host.

    measured: dict(listeners=[dict(port, names, address, pid, comm, unit, own)], ephemeral_range,
    block). ``block`` is None or has a start."""
    problems = []
    names = {}
    for entry in ports:
        names.setdefault(entry["port"], []).append(entry["name"])
    for port, holders in sorted(names.items()):
        if len(holders) > 1:
            problems.append("%s are all %d: give each its own port" % (" and ".join(holders), port))
    first = last = None
    if block:
        first, last = block["start"], block["start"] + block["size"] - 1
        for entry in ports:
            if first <= entry["port"] <= last:
                problems.append(
                    "port %d (%s) is inside the block of the instance's internal ports (%s), which vLLM takes its "
                    "internal ports from (VLLM_PORT and up): choose %s outside it, or move %s"
                    % (entry["port"], entry["name"], block_text(block), entry["name"], block["name"]))

    def label(port):
        found = list(names.get(port, []))
        if block and first <= port <= last:
            found.append("internal port block %s" % block_text(block))
        return found

    listeners = [dict(item) for item in tcp_listeners(proc_root) if label(item["port"])] if (ports or block) else []
    owners, denied = socket_owners(proc_root, set(item["inode"] for item in listeners))
    seen = {}
    for item in listeners:
        pids = owners.get(item["inode"], [])
        for pid in pids:
            if pid not in seen:
                seen[pid] = process(proc_root, pid)
        procs = [seen[pid] for pid in pids]
        own = [proc for proc in procs if proc["unit"] and proc["unit"] in own_units]
        holder = (own or procs or [dict(pid=None, comm=None, unit=None)])[0]
        item.update(names=label(item["port"]), pid=holder["pid"], comm=holder["comm"], unit=holder["unit"],
                    own=bool(own))
    reported = set()
    for item in sorted(listeners, key=lambda entry: entry["port"]):
        if item["own"] or item["port"] in reported:
            continue
        reported.add(item["port"])
        what = "port %d (%s)" % (item["port"], "; ".join(item["names"]))
        fix = _port_fix(item["port"], names, block)
        if item["pid"] is None:
            if denied:
                problems.append(
                    "%s is taken by a process this module cannot see (socket inode %d; the open files of %d processes "
                    "could not be read): run the preflight as root (become) to name it, or %s"
                    % (what, item["inode"], denied, fix))
            else:
                problems.append(
                    "%s is taken by a process this module cannot see (socket inode %d, held by no process of this PID "
                    "namespace, such as a container's): %s" % (what, item["inode"], fix))
        else:
            owner = item["unit"] or "a process outside the systemd services"
            problems.append("%s is taken by %s (pid %d, %s): %s%s"
                            % (what, owner, item["pid"], item["comm"] or "?", fix,
                               ", or stop %s" % item["unit"] if item["unit"] else ""))
    measured = dict(
        listeners=[dict((k, item[k]) for k in ("port", "names", "address", "pid", "comm", "unit", "own")) for item in listeners],
        ephemeral_range=None, block=None)
    if block:
        measured["block"] = dict(name=block["name"], start=first, size=block["size"], last=last)
        problems.extend(ephemeral_findings(proc_root, block, measured))
    return measured, problems


def _port_fix(port, names, block):
    variables = list(names.get(port, []))
    if block and block["start"] <= port < block["start"] + block["size"]:
        variables.append(block["name"])
    return "choose another %s" % " or ".join(variables)


def ephemeral_findings(proc_root, block, measured):
    """Problems of the block inside the kernel's ephemeral range (less the reserved ports)."""
    ipv4 = os.path.join(proc_root, "sys", "net", "ipv4")
    ephemeral = port_range(read_text(os.path.join(ipv4, "ip_local_port_range")))
    measured["ephemeral_range"] = list(ephemeral) if ephemeral else None
    if not ephemeral:
        return []
    first, last = block["start"], block["start"] + block["size"] - 1
    low, high = max(first, ephemeral[0]), min(last, ephemeral[1])
    if low > high:
        return []
    reserved = reserved_ports(read_text(os.path.join(ipv4, "ip_local_reserved_ports")))
    inside = [port for port in range(low, high + 1) if port not in reserved]
    if not inside:
        return []
    return ["the internal port block %s is inside the kernel's ephemeral port range %d-%d (sysctl "
            "net.ipv4.ip_local_port_range; %d of its ports, %d-%d), where any program's connect() or bind() to port 0 "
            "may take a port before vLLM binds it: move %s below %d or above %d, or reserve the block "
            "(sysctl net.ipv4.ip_local_reserved_ports)"
            % (block_text(block), ephemeral[0], ephemeral[1], len(inside), inside[0], inside[-1], block["name"],
               ephemeral[0], ephemeral[1])]


# ---------------------------------------------------------------------------- the other engine units


def _unescape(char):
    return {"n": "\n", "t": "\t", "r": "\r"}.get(char, char)


def split_words(text):
    """The words of a systemd setting such as ``Environment=``: separated by white space, each
    possibly quoted (double or single quotes, also within a word), backslash escapes resolved."""
    words, i, n = [], 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return words
        word, quote = [], None
        while i < n:
            char = text[i]
            if char == "\\" and i + 1 < n:
                word.append(_unescape(text[i + 1]))
                i += 2
                continue
            if quote:
                if char == quote:
                    quote = None
                else:
                    word.append(char)
            elif char.isspace():
                break
            elif char in "\"'":
                quote = char
            else:
                word.append(char)
            i += 1
        words.append("".join(word))


def unit_service_settings(texts, names):
    """[(name, value)] of the [Service] settings ``names`` in unit file texts (the unit, then its
    drop-ins), in order; continued lines joined, comments skipped."""
    found = []
    for text in texts:
        section, pending = None, ""
        for raw in text.splitlines() + [""]:
            line = raw.strip()
            if pending and line[:1] in ("#", ";"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = (pending + line).strip(), ""
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            name, sep, value = line.partition("=")
            if sep and section == "Service" and name.strip() in names:
                found.append((name.strip(), value.strip()))
    return found


def parse_environment_file(text):
    """KEY=VALUE lines (values possibly in double or single quotes) of a systemd EnvironmentFile."""
    values = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r'\\(["\\`$])', r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def unit_environment(texts):
    """(the environment a unit's Environment= and EnvironmentFile= lines give (files override,
    as in systemd), the files that could not be read (path, why))."""
    env, files, unread = {}, [], []
    for name, value in unit_service_settings(texts, ("Environment", "EnvironmentFile")):
        if name == "Environment":
            if not value:
                env = {}
            for word in split_words(value):
                var, sep, val = word.partition("=")
                if sep and var:
                    env[var] = val
        elif not value:
            files = []
        else:
            files.append(value)
    for value in files:
        optional = value.startswith("-")
        pattern = value[1:] if optional else value
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in paths:
            text = read_text(path)
            if text is None:
                if not (optional and not os.path.exists(path)):
                    unread.append((path, "missing" if not os.path.exists(path) else "unreadable"))
                continue
            env.update(parse_environment_file(text))
    return env, unread


def engine_units(units_dir, unit):
    """({unit: dict(gpus=[...] or None, port_base=int or None)}, [(unit, path, why)]) of the engine
    units in ``units_dir`` (vllm.service, vllm@NAME.service) other than ``unit``. A masked unit (a
    link to /dev/null) does not count."""
    try:
        names = sorted(name for name in os.listdir(units_dir) if ENGINE_UNIT.match(name) and name != unit)
    except OSError:
        return {}, []
    found, unread = {}, []
    for name in names:
        path = os.path.join(units_dir, name)
        if not os.path.isfile(path):
            continue
        texts = [read_text(path) or ""]
        for dropin in sorted(glob.glob(os.path.join(glob.escape(path) + ".d", "*.conf"))):
            texts.append(read_text(dropin) or "")
        env, missing = unit_environment(texts)
        unread.extend((name, file_path, why) for file_path, why in missing)
        devices = env.get("CUDA_VISIBLE_DEVICES")
        port = (env.get("VLLM_PORT") or "").strip()
        found[name] = dict(
            gpus=None if devices is None else [item.strip() for item in devices.split(",") if item.strip()],
            port_base=int(port) if port.isdigit() else None)
    return found, unread


def _claim(entry, host, migs):
    """(UUID, parent GPU UUID or None) of a CUDA_VISIBLE_DEVICES entry, lower case; an index is
    the UUID of the host's GPU of that index where known."""
    text = entry.strip()
    if text.isdigit():
        gpu = next((g for g in host if "%s" % g.get("index") == text), None)
        return (key(gpu.get("uuid")) if gpu and gpu.get("uuid") else "index " + text), None
    parent = migs.get(key(text))
    return key(text), key(parent[0]["uuid"]) if parent else None


def _overlap(first, second):
    return first[0] == second[0] or (first[1] is not None and first[1] == second[0]) or \
        (second[1] is not None and second[1] == first[0])


def _gpus_text(gpus):
    return "every GPU, no CUDA_VISIBLE_DEVICES" if gpus is None else ", ".join(gpus) or "none"


def unit_findings(others, unit, gpus, variable, host, listing, check_gpus=True, block=None):
    """Problems of this instance (``unit``, GPUs ``gpus`` named by ``variable``, port ``block``)
    against the machine's other engine units (engine_units)."""
    problems = []
    migs = mig_parents(listing)
    if check_gpus and others:
        if not gpus:
            problems.append(
                "%s is empty, so this engine (%s) would take every GPU of the machine, and %s run%s here too (%s): list "
                "the GPUs of each instance, by UUID"
                % (variable, unit, ", ".join(sorted(others)), "s" if len(others) == 1 else "",
                   "; ".join("%s: %s" % (name, _gpus_text(others[name]["gpus"])) for name in sorted(others))))
        else:
            mine = [(uuid, _claim(uuid, host, migs)) for uuid in gpus]
            for name in sorted(others):
                theirs = others[name]["gpus"]
                if theirs is None:
                    problems.append(
                        "%s has no CUDA_VISIBLE_DEVICES, so it takes every GPU of the machine, this instance's (%s, %s: "
                        "%s) too: list the GPUs of each instance, or remove %s if it no longer serves"
                        % (name, unit, variable, ", ".join(gpus), name))
                    continue
                claims = [(entry, _claim(entry, host, migs)) for entry in theirs]
                shared = [uuid for uuid, claim in mine if any(_overlap(claim, other) for dummy, other in claims)]
                if shared:
                    problems.append(
                        "%s has %s, which %s, another engine of this machine, uses too (CUDA_VISIBLE_DEVICES=%s): give "
                        "each instance GPUs of its own" % (variable, ", ".join(shared), name, ",".join(theirs)))
    if block:
        first, last = block["start"], block["start"] + block["size"] - 1
        for name in sorted(others):
            base = others[name]["port_base"]
            if base is not None and base <= last and first <= base + block["size"] - 1:
                problems.append(
                    "the internal port block %s overlaps that of %s, another engine of this machine (VLLM_PORT=%d, "
                    "ports %d-%d): give each instance a block of its own (move %s)"
                    % (block_text(block), name, base, base, base + block["size"] - 1, block["name"]))
    return problems


def machine_id(path):
    """The machine's ID (/etc/machine-id), or "" when it cannot be read."""
    text = read_text(path)
    return text.strip() if text else ""
