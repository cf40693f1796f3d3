# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read GPUs under load from ``nvidia-smi`` and the kernel log, and judge the hardware.

The formats are the real tools' (nvidia-smi of the drivers 570 to 610, NVIDIA's Xid messages):

* ``nvidia-smi --query-gpu=LOAD_FIELDS --format=csv,noheader,nounits``: one line per GPU, values in
  the order asked for, ``", "`` between them, unquoted; ``[N/A]`` (``[Not Supported]``, older
  drivers ``N/A``) where the GPU has no value: utilization under MIG, the ECC counters of a GPU
  without ECC, the retired pages of a GPU that remaps rows instead (Ampere and later). The clock
  event reasons are a 64-bit mask printed ``0x%016X`` (``0x0000000000000001``: idle); the pending
  flags print ``Yes`` or ``No``. ``clocks_event_reasons.*`` is the name ``--help-query-gpu`` of
  the 5xx and 610 drivers gives first, ``clocks_throttle_reasons.*`` its older alias;
  ``pcie.link.gen.current`` is deprecated for ``pcie.link.gen.gpucurrent`` from 590 on and still
  answered. The reasons' bits are NVML's ``nvmlClocksEventReason*`` (nvml.h).
* The kernel log (``journalctl -k``, ``dmesg``): NVIDIA's driver writes
  ``NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``
  (``krcReportXid`` in open-gpu-kernel-modules' ``kernel_rc.c``: ``pid=``/``name=`` only where it
  knows the process, `` GPU-I:NN GPU-CI:NN`` after the address on a MIG instance; older drivers
  without ``PCI:``); the PCI address there is domain:bus:device in lower case, nvidia-smi's
  ``pci.bus_id`` is ``00000000:C1:00.0``.

Only readings taken while a GPU works count for its link and clocks: an idle GPU lowers both
(RTX PRO 6000 links train down to Gen1), so an idle reading proves nothing either way.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

from ansible_collections.fleet.vllm.plugins.module_utils._nvidia_smi import (
    NvidiaSmiParseError,
    _available,
    _int_or_none,
    query_argv,
    query_gpus,
)

# What --query-gpu is asked for under load, in this order (the real tool's names).
LOAD_FIELDS = (
    "index",
    "uuid",
    "pci.bus_id",
    "name",
    "utilization.gpu",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks.sm",
    "clocks.max.sm",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
)

# nvmlClocksEventReason* (nvml.h): bit -> what nvidia-smi -q calls it.
CLOCK_EVENT_REASONS = (
    (0x1, "idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
    (0x100, "display clock setting"),
)
# Reasons that fail a GPU under load: the hardware or the temperature holds its clocks down.
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80
SW_POWER_CAP = 0x4

# The Xids this collection names in its messages (NVIDIA's Xid catalog); others print as "Xid N".
XID_MEANINGS = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed",
}

DEFAULT_BUSY_UTILIZATION = 50
# The checks of hardware_verdict, in the order its failures list them for one GPU.
CHECKS = ("pcie_link", "clocks", "ecc", "pages", "xid")

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<function>[0-7]))?(?: GPU-I:\d+(?: GPU-CI:\d+)?)?\): (?P<xid>\d+)\b"
)
_HEX = re.compile(r"^0[xX][0-9A-Fa-f]+$")
_FLAGS = {"Yes": True, "No": False}


def load_query_argv(nvidia_smi):
    """The argument list of one sample: ``nvidia-smi --query-gpu=LOAD_FIELDS --format=csv,noheader,nounits``."""
    return query_argv(nvidia_smi, LOAD_FIELDS)


# ---- one sample ------------------------------------------------------------------------------


def parse_load_sample(text):
    """GPUs of one sample (the output of load_query_argv), sorted by index.

    Each is a dict: index (int); uuid, pci_bus_id, name (str or None); utilization_gpu (%),
    pcie_link_gen_current, pcie_link_gen_max, pcie_link_width_current, pcie_link_width_max,
    clocks_sm, clocks_max_sm (MHz), clock_event_reasons (the mask), ecc_uncorrected_volatile
    (int or None); retired_pages_pending, remapped_rows_pending (bool or None). None is what the
    tool printed as [N/A] or [Not Supported].

    Raises NvidiaSmiParseError when a line has not one value per field, or a value is not of
    its field's kind."""
    return query_gpus(text, LOAD_FIELDS, _gpu_from_values)


def _gpu_from_values(row, what, line, number):
    def whole(field):
        return _int_or_none(row[field], what, field, line, number)

    def text(field):
        return row[field] if _available(row[field]) else None

    index = whole("index")
    if index is None:
        raise NvidiaSmiParseError(what, "index is %r" % row["index"], line, number)
    return dict(
        index=index,
        uuid=text("uuid"),
        pci_bus_id=text("pci.bus_id"),
        name=text("name"),
        utilization_gpu=whole("utilization.gpu"),
        pcie_link_gen_current=whole("pcie.link.gen.current"),
        pcie_link_gen_max=whole("pcie.link.gen.max"),
        pcie_link_width_current=whole("pcie.link.width.current"),
        pcie_link_width_max=whole("pcie.link.width.max"),
        clocks_sm=whole("clocks.sm"),
        clocks_max_sm=whole("clocks.max.sm"),
        clock_event_reasons=_mask(row["clocks_event_reasons.active"], what, line, number),
        ecc_uncorrected_volatile=whole("ecc.errors.uncorrected.volatile.total"),
        retired_pages_pending=_flag(row, "retired_pages.pending", what, line, number),
        remapped_rows_pending=_flag(row, "remapped_rows.pending", what, line, number),
    )


def _mask(value, what, line, number):
    if not _available(value):
        return None
    if not _HEX.match(value):
        raise NvidiaSmiParseError(
            what, "clocks_event_reasons.active is %r, expected a mask such as 0x0000000000000001" % value, line, number
        )
    return int(value, 16)


def _flag(row, field, what, line, number):
    value = row[field]
    if not _available(value):
        return None
    if value not in _FLAGS:
        raise NvidiaSmiParseError(what, "%s is %r, expected Yes or No" % (field, value), line, number)
    return _FLAGS[value]


def reason_names(mask):
    """The names of the bits set in a clock event reasons mask; unknown bits as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, dummy in CLOCK_EVENT_REASONS:
        known |= bit
    if mask & ~known:
        names.append("0x%X" % (mask & ~known))
    return names


# ---- the kernel log --------------------------------------------------------------------------


def xid_events(kernel_log_text):
    """The Xid lines of a kernel log, in order: [{"bus_id": "00000000:C1:00.0", "xid": 79, "line": ...}].

    The bus id is written as nvidia-smi's pci.bus_id (8-digit domain, upper case, function 0 where
    the line has none), so that it matches a GPU of parse_load_sample."""
    events = []
    for raw in kernel_log_text.splitlines():
        match = _XID.search(raw)
        if not match:
            continue
        bus_id = "%08X:%s:%s.%s" % (
            int(match.group("domain"), 16),
            match.group("bus").upper(),
            match.group("device").upper(),
            match.group("function") or "0",
        )
        events.append(dict(bus_id=bus_id, xid=int(match.group("xid")), line=raw.strip()))
    return events


# ---- the verdict -----------------------------------------------------------------------------


def hardware_verdict(samples, xid_events, busy_utilization=DEFAULT_BUSY_UTILIZATION):  # pylint: disable=redefined-outer-name
    """Judge GPUs from samples taken under load (each a parse_load_sample list) and Xid events.

    A GPU is under load in the samples where its utilization is busy_utilization % or more; its
    link under load is the best generation and width of those samples, which fail when below
    its maximum, and so do its clocks when a hardware or thermal reason held them down in one of
    them. Uncorrected ECC errors and pending page retirements or row remaps fail a GPU in any
    sample, and every Xid line fails the GPU it names. A GPU never seen under load gets a note,
    neither a failure nor a pass of its link.

    Returns dict(failures=[dict(gpu, bus_id, check, observed, expected, message)], notes=[str],
    gpus_under_load=int, samples=int); check is one of pcie_link, clocks, ecc, pages, xid; gpu is
    the index, None for an Xid of a bus id no sample listed; failures are sorted by GPU, then in
    the order of CHECKS. No failure is a pass only for the gpus_under_load GPUs: the link and
    clocks of the others were not checked, and the notes name them."""
    readings = {}
    for sample in samples:
        for gpu in sample:
            readings.setdefault(gpu["index"], []).append(gpu)

    failures = []
    notes = []
    under_load = 0
    if not samples:
        notes.append("no sample of nvidia-smi was taken: no GPU was checked under load")
    for index in sorted(readings):
        gpu_readings = readings[index]
        label = _label(index, _bus_id(gpu_readings))
        if len(gpu_readings) < len(samples):
            notes.append("%s answered in %d of %d samples" % (label, len(gpu_readings), len(samples)))
        busy = [r for r in gpu_readings if r["utilization_gpu"] is not None and r["utilization_gpu"] >= busy_utilization]
        if busy:
            under_load += 1
            failures.extend(_link_failures(index, label, busy, notes))
            failures.extend(_clock_failures(index, label, busy, notes))
        else:
            notes.append("%s not seen under load: its link was not checked, nor its clocks (%s)" % (
                label, _utilization_seen(gpu_readings, busy_utilization)))
        failures.extend(_memory_failures(index, label, gpu_readings))
    failures.extend(_xid_failures(readings, xid_events))
    failures.sort(key=lambda f: (f["gpu"] is None, f["gpu"] or 0, CHECKS.index(f["check"])))
    return dict(failures=failures, notes=notes, gpus_under_load=under_load, samples=len(samples))


def _bus_id(gpu_readings):
    return next((r["pci_bus_id"] for r in gpu_readings if r["pci_bus_id"]), None)


def _label(index, bus_id):
    return "GPU %d (%s)" % (index, bus_id or "bus id not reported")


def _utilization_seen(gpu_readings, busy_utilization):
    values = [r["utilization_gpu"] for r in gpu_readings if r["utilization_gpu"] is not None]
    count = "%d sample%s" % (len(gpu_readings), "" if len(gpu_readings) == 1 else "s")
    if not values:
        return "nvidia-smi reported no utilization in %s; under load is %d %% or more" % (count, busy_utilization)
    return "its utilization peaked at %d %% in %s; under load is %d %% or more" % (max(values), count, busy_utilization)


def _best(values):
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _link(gen, width):
    return "Gen%s x%s" % ("?" if gen is None else gen, "?" if width is None else width)


def _link_failures(index, label, busy, notes):
    gen = _best(r["pcie_link_gen_current"] for r in busy)
    width = _best(r["pcie_link_width_current"] for r in busy)
    gen_max = _best(r["pcie_link_gen_max"] for r in busy)
    width_max = _best(r["pcie_link_width_max"] for r in busy)
    unknown = [name for name, value in (("generation", gen), ("maximum generation", gen_max), ("width", width),
                                        ("maximum width", width_max)) if value is None]
    if unknown:
        notes.append("%s: nvidia-smi did not report the link's %s under load; that part was not checked" % (
            label, " or ".join(unknown)))
    slow = (gen is not None and gen_max is not None and gen < gen_max) or (
        width is not None and width_max is not None and width < width_max)
    if not slow:
        return []
    observed, expected = _link(gen, width), _link(gen_max, width_max)
    return [_failure(index, busy, "pcie_link", observed, expected, "%s runs its PCIe link at %s under load; its maximum is %s" % (
        label, observed, expected))]


def _clock_failures(index, label, busy, notes):
    known = [r for r in busy if r["clock_event_reasons"] is not None]
    if not known:
        notes.append("%s: nvidia-smi did not report its clock event reasons under load; its clocks were not checked" % label)
        return []
    slowed = [r for r in known if r["clock_event_reasons"] & SLOWDOWN_MASK]
    if any(r["clock_event_reasons"] & SW_POWER_CAP for r in known):
        notes.append("%s held its power limit under load (SW power cap), which lowers clocks by design: not a fault" % label)
    if not slowed:
        return []
    mask = 0
    for reading in slowed:
        mask |= reading["clock_event_reasons"] & SLOWDOWN_MASK
    reasons = ", ".join(reason_names(mask))
    clock = min((r["clocks_sm"] for r in slowed if r["clocks_sm"] is not None), default=None)
    clock_max = _best(r["clocks_max_sm"] for r in busy)
    sm = "SM clock %s MHz" % ("?" if clock is None else clock)
    observed = "%s (0x%016X) at %s" % (reasons, mask, sm)
    expected = "no hardware or thermal slowdown; SM clock up to %s MHz" % ("?" if clock_max is None else clock_max)
    message = "%s is slowed down under load by %s (clock event reasons 0x%016X) in %d of %d busy samples: its %s, its maximum %s MHz" % (
        label, reasons, mask, len(slowed), len(busy), sm, "?" if clock_max is None else clock_max)
    return [_failure(index, busy, "clocks", observed, expected, message)]


def _memory_failures(index, label, gpu_readings):
    failures = []
    errors = _best(r["ecc_uncorrected_volatile"] for r in gpu_readings)
    if errors:
        failures.append(_failure(index, gpu_readings, "ecc", "%d uncorrected ECC errors" % errors, "0",
                                 "%s has %d uncorrected ECC errors since the driver loaded "
                                 "(ecc.errors.uncorrected.volatile.total); it should have 0" % (label, errors)))
    pending = []
    if any(r["retired_pages_pending"] for r in gpu_readings):
        pending.append("retired pages pending")
    if any(r["remapped_rows_pending"] for r in gpu_readings):
        pending.append("row remapping pending")
    if pending:
        what = " and ".join(pending)
        failures.append(_failure(index, gpu_readings, "pages", what, "none pending",
                                 "%s has %s: memory it can no longer trust, until a GPU reset or reboot; "
                                 "it should have none pending" % (label, what)))
    return failures


def _xid_failures(readings, events):
    by_bus = {}
    for index in sorted(readings):
        bus_id = _bus_id(readings[index])
        if bus_id:
            by_bus.setdefault(bus_id.upper(), index)
    grouped = []
    counts = {}
    for event in events:
        key = (event["bus_id"], event["xid"])
        if key not in counts:
            grouped.append(event)
        counts[key] = counts.get(key, 0) + 1
    failures = []
    for event in grouped:
        key = (event["bus_id"], event["xid"])
        index = by_bus.get(event["bus_id"].upper())
        label = _label(index, event["bus_id"]) if index is not None else (
            "a GPU at %s that no sample of nvidia-smi listed" % event["bus_id"])
        meaning = XID_MEANINGS.get(event["xid"])
        observed = "Xid %d%s" % (event["xid"], " (%s)" % meaning if meaning else "")
        times = "" if counts[key] == 1 else " %d times" % counts[key]
        failures.append(dict(
            gpu=index, bus_id=event["bus_id"], check="xid", observed=observed, expected="no Xid",
            message="%s logged %s in the kernel log%s: %s" % (label, observed, times, event["line"]),
        ))
    return failures


def _failure(index, gpu_readings, check, observed, expected, message):
    return dict(gpu=index, bus_id=_bus_id(gpu_readings), check=check, observed=observed, expected=expected, message=message)
