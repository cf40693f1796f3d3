"""Facts the documentation and the argument specs state, held to their sources (issue 27).

Each case is a statement that was once written wrong, the text that replaced it, and where the
right one was read; the code's own facts (the version tables, HAProxy's admin bits) are tested
against vLLM and HAProxy themselves in test_vllm_support_wheels.py and test_haproxy_server.py.
"""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT

from tools.role_docs import markdown


def text(path):
    return (ROOT / path).read_text(encoding="utf-8")


def test_role_readmes_give_the_controller_core_the_collection_requires():
    """meta/runtime.yml's requires_ansible is the oldest core (docs/ansible-compat.md); a role
    README naming another one sends a user of 2.16 to 2.19 for nothing."""
    oldest = re.match(r">=\s*(\d+\.\d+)", yaml.safe_load(text("meta/runtime.yml"))["requires_ansible"]).group(1)
    named = {}
    for readme in sorted((ROOT / "roles").glob("*/README.md")) + [ROOT / "README.md"]:
        for match in re.finditer(r"ansible-core (\d+\.\d+) or (?:later|newer) on the controller", readme.read_text()):
            named[str(readme.relative_to(ROOT))] = match.group(1)
    assert "roles/vllm_preflight/README.md" in named
    assert {path: oldest for path in named} == named


def test_start_limit_burst_counts_the_roles_own_start():
    """systemd counts every start against StartLimitBurst, the deliberate one too (systemd.unit(5);
    measured on systemd 252: StartLimitBurst=3, the fourth start refused, docs/evidence.md section 8).
    After the role's start a crash loop gets burst - 1 automatic restarts, not burst."""
    default = yaml.safe_load(text("roles/vllm_server/defaults/main.yml"))["vllm_server_start_limit_burst"]
    specs = yaml.safe_load(text("roles/vllm_server/meta/argument_specs.yml"))["argument_specs"]
    descriptions = [entry["options"]["vllm_server_start_limit_burst"]["description"]
                    for entry in specs.values() if "vllm_server_start_limit_burst" in entry.get("options", {})]
    assert descriptions
    readme = text("roles/vllm_server/README.md")
    row = [line for line in readme.splitlines() if line.startswith("| `vllm_server_start_limit_burst` |")]
    # (the README's table is generated from the spec: tools/role_docs.py)
    assert len(row) == 1 and row[0].startswith("| `vllm_server_start_limit_burst` | int | `%d` |" % default)
    assert row[0].endswith(" | %s |" % markdown(descriptions[0])), row
    for description in descriptions:
        assert "the role's own start included" in description
        assert "%d with the default" % (default - 1) in description
    assert "`vllm_server_start_limit_burst` - 1 automatic restarts (%d with the default %d)" % (default - 1, default) in readme
    assert "vllm_server_start_limit_burst - 1 automatic restarts" in text("roles/vllm_server/tasks/roll.yml")
    assert "`StartLimitBurst` - 1 automatic restarts" in text("docs/evidence.md")


# (file, text it must hold, text it must not, where the fact was read)
CITATIONS = [
    # vLLM PR #32795 "Explicitly report support for kv_cache_dtype bfloat16"; #34752 is the issue
    # about --kv-cache-dtype and kv_cache_quant_algo
    ("plugins/module_utils/_vllm_support.py", "#32795", "list none: issue\n  #34752"),
    # PR #29980 was merged and reverted (PR #30653); PR #30785 landed it
    ("docs/evidence.md", "follows the checkpoint (PR #30785", "follows the checkpoint (PR #29980"),
    ("docs/kv-cache.md", "(vLLM PR #30785", "(vLLM PR #29980)"),
    # vLLM main's FLASHINFER_FA2_MLA (vllm/v1/attention/backends/mla/flashinfer_fa2_mla.py) is a
    # dense MLA backend on 12.x too (bf16 only)
    ("docs/evidence.md", "FLASHINFER_FA2_MLA", "the only dense MLA backend is\n  `TRITON_MLA`. Before"),
    ("docs/kv-cache.md", "FLASHINFER_FA2_MLA", "12.x the only dense MLA backend is `TRITON_MLA`"),
    ("plugins/module_utils/_vllm_support.py", "FLASHINFER_FA2_MLA", "``TRITON_MLA``, the only dense MLA backend on"),
    ("plugins/modules/vllm_probe.py", "FLASHINFER_FA2_MLA", "the only dense MLA\n    backend on compute capability 12.x, takes"),
    ("plugins/module_utils/_failures.py", "the only dense MLA backend that can take an FP8 KV",
     "the only dense MLA backend is TRITON_MLA"),
    # RsyncProject/rsync: tag v3.5.0 is commit 471e17dc; 7c20b077 is v3.5.0-16-g7c20b077
    ("docs/evidence.md", "tag v3.5.0, commit 471e17dc", "7c20b077"),
    # HAProxy 2.6 src/server.c: health = rise at start and on leaving maintenance, so "UP 1/2" also
    # follows a start, a reload or a put-back, not only a failed check
    ("docs/evidence.md", "is also the state right after a start, a reload", "`UP 1/2` is a server going down\n  (up, but its last check failed"),
    # NCCL's env.rst lists NCCL_PROTO and NCCL_P2P_LEVEL under "Debugging"
    ("docs/evidence.md", "NCCL's page lists both under \"Debugging\"", None),
]


@pytest.mark.parametrize("path, holds, not_holds", CITATIONS, ids=["%s:%s" % (c[0], c[1][:24]) for c in CITATIONS])
def test_corrected_citations(path, holds, not_holds):
    body = text(path)
    assert holds in body
    if not_holds:
        assert not_holds not in body


def test_the_nccl_defaults_say_what_they_do_and_why():
    """docs/evidence.md section 3 explains both defaults from NCCL's sources, says why they are
    defaults, and where a fleet measures them."""
    section = text("docs/evidence.md").split("## 3. ", 1)[1].split("\n## ", 1)[0]
    item = section[section.index("- What the two defaults do on PCIe-only Blackwell"):]
    for needed in ("`NCCL_P2P_LEVEL=SYS`", "`NCCL_PROTO=LL`", "src/graph/paths.cc", "src/graph/tuning.cc",
                   "LL128", "the seed's hand deployment", "acceptance run"):
        assert needed in item, needed
