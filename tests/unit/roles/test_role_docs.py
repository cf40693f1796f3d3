"""The variable tables of the role READMEs are what their meta/argument_specs.yml say (types,
defaults, entry points, descriptions): tools/role_docs.py writes them, and this checks them."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from tools.role_docs import default, kind, markdown, render


def test_every_readme_table_is_what_the_specs_say():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "role_docs.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_a_drifted_default_is_found(tmp_path):
    """The check bites: a README whose table says another default is not what render() writes."""
    text = (ROOT / "roles" / "vllm_nccl" / "README.md").read_text()
    drifted = text.replace("| `vllm_nccl_allowed_extra` | list of str | `[CUDA_DEVICE_ORDER",
                           "| `vllm_nccl_allowed_extra` | list of str | `[CUDA_DEVICE", 1)
    assert drifted != text
    assert render("vllm_nccl", drifted) == text


def test_the_markup_becomes_markdown():
    assert markdown("O(a_b) is V(1) or C(x|y) (M(fleet.vllm.gpu_info), I(really), U(https://x), L(the docs, https://d))") \
        == "`a_b` is `1` or `x\\|y` (`fleet.vllm.gpu_info`, *really*, https://x, [the docs](https://d))"
    assert markdown("C(variants/<commit>-<venv>) and C(f(x))") == "`variants/<commit>-<venv>` and `f(x)`"


def test_defaults_and_types_are_shown_as_yaml():
    assert default({"default": ""}) == '`""`' and default({"default": None}) == "`null`" and default({}) == ""
    assert default({"default": [1, "a"]}) == "`[1, a]`" and default({"default": False}) == "`false`"
    assert default({"default": "{{ x | y }}"}) == "`{{ x \\| y }}`"
    assert kind({"type": "list", "elements": "str"}) == "list of str" and kind({}) == "str"
