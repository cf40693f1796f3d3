# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse what ``nvidia-smi`` prints about a host's GPUs, and summarise it.

The formats are the real tool's (drivers 570 to 610, see docs in the gpu_info module):

* ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``: one line per GPU, the
  values in the order asked for, separated by ``", "``, unquoted; ``[N/A]`` (older drivers
  ``N/A``, ``[Not Supported]``) where the GPU has no value.
* ``nvidia-smi --version``: ``KEY : VALUE`` lines. Up to the 5xx drivers ``CUDA Version : 13.0``;
  from 610 on ``CUDA version : Deprecated, see "CUDA UMD version" instead`` and
  ``CUDA UMD version : 13.3``.
* plain ``nvidia-smi``: the header line ``| NVIDIA-SMI 580.95.05  Driver Version: 580.95.05
  CUDA Version: 13.0 |`` (610 on: ``KMD Version:`` and ``CUDA UMD Version:``); a vGPU host
  driver prints ``CUDA Version: Not Found``.
* ``nvidia-smi topo -m``: a tab-separated matrix. The header row is underlined with ANSI
  escapes (``ESC[4m`` ... ``ESC[0m``) even when the output is not a terminal; it names the
  devices (``GPU0``..., ``NIC0``...) then ``CPU Affinity``, ``NUMA Affinity`` and
  ``GPU NUMA ID`` (older drivers print fewer of these). A row holds the link to each device
  (`` X `` for itself, ``NV#`` for # bonded NVLinks, ``PIX``, ``PXB``, ``PHB``, ``NODE``,
  ``SYS`` for PCIe paths of growing length; ``SOC`` is the old name of ``SYS``), then the
  affinities; an empty cell pads ``NUMA Affinity`` and NIC rows have no affinities. A legend
  follows, then, with NICs, ``NIC Legend:`` mapping ``NIC0`` to a device name.

Private to the fleet.vllm collection: the interface may change without notice.
"""

from __future__ import annotations

import re

# What the gpu_info module asks --query-gpu for, in this order. pcie.link.gen.current is
# deprecated in favour of pcie.link.gen.gpucurrent from the 590 drivers on, but is still
# accepted, and it is the only one older drivers know.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "memory.total",
    "driver_version",
    "pcie.link.gen.max",
    "pcie.link.gen.current",
    "pcie.link.width.max",
    "pcie.link.width.current",
)
QUERY_FORMAT = "csv,noheader,nounits"

NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")

PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NVLINK = re.compile(r"^NV(\d+)$")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_CAPABILITY = re.compile(r"^(\d+)\.(\d+)$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_HEADER_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*(\S+)")
_HEADER_CUDA = re.compile(r"CUDA (?:UMD )?Version:\s*(\S+(?: Found)?)")


class NvidiaSmiParseError(Exception):
    """Output that does not have the expected shape: ``line`` is the offending line (or '')."""

    def __init__(self, what, reason, line="", line_number=None):
        self.what = what
        self.reason = reason
        self.line = line
        self.line_number = line_number
        where = "" if line_number is None else " line %d" % line_number
        shown = " %r" % line if line or line_number is not None else ""
        super(NvidiaSmiParseError, self).__init__("%s%s%s: %s" % (what, where, shown, reason))


def query_argv(nvidia_smi, fields=QUERY_FIELDS):
    return [nvidia_smi, "--query-gpu=%s" % ",".join(fields), "--format=%s" % QUERY_FORMAT]


def version_argv(nvidia_smi):
    return [nvidia_smi, "--version"]


def summary_argv(nvidia_smi):
    return [nvidia_smi]


def topology_argv(nvidia_smi):
    return [nvidia_smi, "topo", "-m"]


def strip_ansi(text):
    return _ANSI.sub("", text)


def _available(value):
    return value.strip() not in NOT_AVAILABLE


def _int_or_none(value, what, field, line, number):
    value = value.strip()
    if not _available(value):
        return None
    try:
        return int(value)
    except ValueError:
        raise NvidiaSmiParseError(what, "%s is %r, expected a whole number" % (field, value), line, number)


# ---- --query-gpu ---------------------------------------------------------------------------


QUERY_WHAT = "nvidia-smi --query-gpu output"


def query_gpus(text, fields, gpu_from_row):
    """GPUs from ``--query-gpu=FIELDS --format=csv,noheader,nounits``, sorted by index: each line's values by field
    name, made a GPU by ``gpu_from_row(row, what, line, number)``. Raises NvidiaSmiParseError when a line has not one
    value per field, or the indexes repeat."""
    gpus = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        # GPU names hold no commas; the tool does not quote values.
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise NvidiaSmiParseError(
                QUERY_WHAT, "%d values, expected %d (%s)" % (len(values), len(fields), ", ".join(fields)), raw, number
            )
        gpus.append(gpu_from_row(dict(zip(fields, values)), QUERY_WHAT, raw, number))
    indexes = [gpu["index"] for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise NvidiaSmiParseError(QUERY_WHAT, "GPU indexes repeat: %s" % ", ".join(str(i) for i in indexes))
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_gpu_query(text, fields=QUERY_FIELDS):
    """GPUs from ``--query-gpu=QUERY_FIELDS --format=csv,noheader,nounits``, sorted by index."""
    return query_gpus(text, fields, _gpu_from_row)


def _gpu_from_row(row, what, line, number):
    index = _int_or_none(row["index"], what, "index", line, number)
    if index is None:
        raise NvidiaSmiParseError(what, "index is %r" % row["index"], line, number)
    name = row["name"]
    if not _available(name):
        raise NvidiaSmiParseError(what, "name is %r" % name, line, number)
    capability = _CAPABILITY.match(row["compute_cap"])
    if not capability:
        raise NvidiaSmiParseError(
            what, "compute_cap is %r, expected MAJOR.MINOR such as 12.0" % row["compute_cap"], line, number
        )
    memory = _int_or_none(row["memory.total"], what, "memory.total", line, number)
    if memory is None:
        raise NvidiaSmiParseError(what, "memory.total is %r, expected MiB" % row["memory.total"], line, number)
    driver = row["driver_version"]
    if not _VERSION.match(driver):
        raise NvidiaSmiParseError(what, "driver_version is %r" % driver, line, number)
    return dict(
        index=index,
        name=name,
        uuid=row["uuid"] if _available(row["uuid"]) else None,
        pci_bus_id=row["pci.bus_id"] if _available(row["pci.bus_id"]) else None,
        compute_capability="%d.%d" % (int(capability.group(1)), int(capability.group(2))),
        compute_capability_major=int(capability.group(1)),
        compute_capability_minor=int(capability.group(2)),
        memory_total_mib=memory,
        driver_version=driver,
        pcie_link_gen_max=_int_or_none(row["pcie.link.gen.max"], what, "pcie.link.gen.max", line, number),
        pcie_link_gen_current=_int_or_none(row["pcie.link.gen.current"], what, "pcie.link.gen.current", line, number),
        pcie_link_width_max=_int_or_none(row["pcie.link.width.max"], what, "pcie.link.width.max", line, number),
        pcie_link_width_current=_int_or_none(
            row["pcie.link.width.current"], what, "pcie.link.width.current", line, number
        ),
    )


# ---- versions ------------------------------------------------------------------------------


def _version_value(value):
    """The value when it is a version number (not "Not Found", "Deprecated, ..."), else None."""
    return value if value and _VERSION.match(value) else None


def parse_version(text):
    """(driver_version, cuda_version) from ``nvidia-smi --version``; None where it has none.

    Raises NvidiaSmiParseError when the text is not ``KEY : VALUE`` lines naming NVIDIA-SMI."""
    what = "nvidia-smi --version output"
    values = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            raise NvidiaSmiParseError(what, "expected KEY : VALUE", raw)
        values[key.strip().lower()] = value.strip()
    if "nvidia-smi version" not in values:
        raise NvidiaSmiParseError(what, "no 'NVIDIA-SMI version' line", text.strip().splitlines()[0] if text.strip() else "")
    driver = _version_value(values.get("kmd version")) or _version_value(values.get("driver version"))
    cuda = _version_value(values.get("cuda umd version")) or _version_value(values.get("cuda version"))
    return driver, cuda


def parse_summary_header(text):
    """(driver_version, cuda_version) from the header of plain ``nvidia-smi``; None where absent.

    A vGPU host driver prints ``CUDA Version: Not Found``: cuda_version is then None."""
    what = "nvidia-smi output"
    for raw in text.splitlines():
        if "NVIDIA-SMI " not in raw:
            continue
        driver = _HEADER_DRIVER.search(raw)
        cuda = _HEADER_CUDA.search(raw)
        if not driver:
            raise NvidiaSmiParseError(what, "the NVIDIA-SMI header names no driver version", raw)
        return _version_value(driver.group(1)), _version_value(cuda.group(1)) if cuda else None
    first = next((line for line in text.splitlines() if line.strip()), "")
    raise NvidiaSmiParseError(what, "no 'NVIDIA-SMI ... Driver Version: ...' header", first)


# ---- topo -m -------------------------------------------------------------------------------


def link_class(code):
    """'self', 'nvlink' or 'pcie' for a link code of ``topo -m``; None if unknown."""
    if code == "X":
        return "self"
    if _NVLINK.match(code):
        return "nvlink"
    if code in PCIE_LINKS:
        return "pcie"
    return None


def parse_topology(text):
    """The matrix of ``nvidia-smi topo -m``.

    Returns dict(devices=[labels in column order], matrix={row: {column: code}},
    affinity={row: {column title: value}}, nics={"NIC0": "mlx5_0"})."""
    what = "nvidia-smi topo -m output"
    lines = strip_ansi(text).splitlines()
    header_at = None
    for position, raw in enumerate(lines):
        cells = [c.strip() for c in raw.split("\t")]
        if "GPU0" in cells:
            header_at = position
            break
        if raw.strip():
            raise NvidiaSmiParseError(what, "expected the header row, tab-separated, starting with GPU0", raw, position + 1)
    if header_at is None:
        raise NvidiaSmiParseError(what, "no header row naming GPU0", lines[0] if lines else "")
    header = [c.strip() for c in lines[header_at].split("\t")]
    if header and header[0] == "":
        header = header[1:]

    rows = []
    for position in range(header_at + 1, len(lines)):
        raw = lines[position]
        if not raw.strip():
            break
        cells = [c.strip() for c in raw.split("\t")]
        rows.append((position + 1, raw, cells[0], cells[1:]))
    labels = [row[2] for row in rows]

    devices = []
    for title in header:
        if title in labels and title not in devices:
            devices.append(title)
        else:
            break
    trailing = header[len(devices):]
    for title in trailing:
        if title in labels or _GPU_LABEL.match(title):
            raise NvidiaSmiParseError(what, "column %s is out of order or has no row" % title, lines[header_at], header_at + 1)
    # GPU0 is in the header: it heads the devices, or the loop above refused it. Every device
    # has a row: the devices are the header's titles that name one.

    matrix = {}
    affinity = {}
    for number, raw, label, cells in rows:
        if label not in devices:
            raise NvidiaSmiParseError(what, "row %s is not a column of the header" % label, raw, number)
        if label in matrix:
            raise NvidiaSmiParseError(what, "row %s appears twice" % label, raw, number)
        if len(cells) < len(devices):
            raise NvidiaSmiParseError(what, "%d link cells, expected %d" % (len(cells), len(devices)), raw, number)
        links = {}
        for column, code in zip(devices, cells[:len(devices)]):
            kind = link_class(code)
            if kind is None:
                raise NvidiaSmiParseError(what, "unknown link type %r between %s and %s" % (code, label, column), raw, number)
            if (kind == "self") != (column == label):
                raise NvidiaSmiParseError(what, "%s to %s is %r" % (label, column, code), raw, number)
            links[column] = code
        matrix[label] = links
        extra = [c for c in cells[len(devices):] if c]
        if len(extra) > len(trailing):
            raise NvidiaSmiParseError(what, "more values than the columns %s" % ", ".join(trailing) if trailing else "values after the matrix", raw, number)
        affinity[label] = dict(zip(trailing, extra))

    for label in devices:
        for column in devices:
            if matrix[label][column] != matrix[column][label]:
                raise NvidiaSmiParseError(
                    what, "the matrix is not symmetric: %s-%s is %s, %s-%s is %s" % (
                        label, column, matrix[label][column], column, label, matrix[column][label]))

    nics = {}
    for raw in lines:  # "  NIC0: mlx5_0" lines of the legend; no row of the matrix looks like one
        match = _NIC_LEGEND.match(raw)
        if match:
            nics[match.group(1)] = match.group(2)
    return dict(devices=devices, matrix=matrix, affinity=affinity, nics=nics)


def _affinity_int(value):
    if value is None or not _available(value):
        return None
    try:
        return int(value)
    except ValueError:
        return None


# ---- the facts -----------------------------------------------------------------------------


def summarise(gpus, cuda_version, topology):
    """The gpu_info facts from parse_gpu_query's GPUs, the CUDA version and parse_topology's matrix.

    Raises NvidiaSmiParseError when the matrix does not describe the GPUs the query listed."""
    what = "nvidia-smi topo -m output"
    gpu_labels = [d for d in topology["devices"] if _GPU_LABEL.match(d)]
    expected = ["GPU%d" % gpu["index"] for gpu in gpus]
    if sorted(gpu_labels) != sorted(expected):
        raise NvidiaSmiParseError(
            what, "the matrix shows %s but --query-gpu listed %s" % (", ".join(gpu_labels) or "no GPU", ", ".join(expected))
        )

    facts_gpus = []
    for gpu in gpus:
        label = "GPU%d" % gpu["index"]
        row = topology["affinity"].get(label, {})
        cpu = row.get("CPU Affinity")
        entry = dict(gpu)
        entry.update(
            cpu_affinity=cpu if cpu is not None and _available(cpu) else None,
            numa_node=_affinity_int(row.get("NUMA Affinity")),
            gpu_numa_id=_affinity_int(row.get("GPU NUMA ID")),
        )
        facts_gpus.append(entry)

    pairs = []
    for first in gpus:
        for second in gpus:
            if second["index"] <= first["index"]:
                continue
            code = topology["matrix"]["GPU%d" % first["index"]]["GPU%d" % second["index"]]
            nvlink = _NVLINK.match(code)
            pairs.append(dict(
                gpus=[first["index"], second["index"]],
                link=code,
                type=link_class(code),
                nvlinks=int(nvlink.group(1)) if nvlink else 0,
            ))

    nvlink_pairs = [p for p in pairs if p["type"] == "nvlink"]
    if not pairs:
        interconnect = "none"
    elif len(nvlink_pairs) == len(pairs):
        interconnect = "nvlink"
    else:
        interconnect = "pcie"

    models = _unique(gpu["name"] for gpu in gpus)
    drivers = _unique(gpu["driver_version"] for gpu in gpus)
    return dict(
        count=len(gpus),
        gpus=facts_gpus,
        models=models,
        model=models[0] if len(models) == 1 else None,
        compute_capabilities=_unique(gpu["compute_capability"] for gpu in gpus),
        memory_total_mib_min=min(gpu["memory_total_mib"] for gpu in gpus) if gpus else None,
        driver_version=drivers[0] if drivers else None,
        cuda_version=cuda_version,
        interconnect=interconnect,
        pcie_only=not nvlink_pairs,
        topology=dict(
            pairs=pairs,
            link_types=sorted(set(p["link"] for p in pairs)),
            matrix=topology["matrix"],
            nics=topology["nics"],
        ),
    )


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def models_by_index(gpus):
    """'MODEL (GPU 0, 1), OTHER (GPU 2)' for a message about a host that mixes models."""
    groups = []
    for model in _unique(gpu["name"] for gpu in gpus):
        indexes = [str(gpu["index"]) for gpu in gpus if gpu["name"] == model]
        groups.append("%s (GPU %s)" % (model, ", ".join(indexes)))
    return "; ".join(groups)
