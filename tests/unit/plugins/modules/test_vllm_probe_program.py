"""The program fleet.vllm.vllm_probe sends to the venv's Python (module_utils/_vllm_probe_payload.py),
run as the module runs it: its source through BOOTSTRAP, in a Python of its own.

Here and not with the in-process tests of tests/unit/plugins/module_utils: mutation testing
(tools/mutation.sh) runs those, and the mutated copy of the program it would send to the child
imports mutmut, which cannot find its run's configuration there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible_collections.fleet.vllm.plugins.module_utils import _vllm_probe_payload as payload
from ansible_collections.fleet.vllm.plugins.module_utils._vllm_probe_payload import BOOTSTRAP, PAYLOAD, source


def test_payload_compiles_and_answers_json_without_vllm(tmp_path):
    """Compile the program the module sends, and run it the way the module does (through
    BOOTSTRAP) with a Python that has no vLLM."""
    compile(PAYLOAD, "<vllm_probe payload>", "exec")
    question_file = tmp_path / "question.json"
    question_file.write_text(json.dumps({"payload": PAYLOAD, "question": {"model_path": None}}))
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(question_file)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["import_error"] == "ModuleNotFoundError: No module named 'vllm'"
    assert answer["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert len(BOOTSTRAP) < 250


def test_the_bootstrap_runs_the_source_as_the_main_program(tmp_path):
    """Through BOOTSTRAP, as the module runs it: the answer on stdout, what was printed on stderr."""
    (tmp_path / "site" / "vllm").mkdir(parents=True)
    (tmp_path / "site" / "vllm" / "__init__.py").write_text("print('hello from vllm')\n__version__ = '0.33.0'\n")
    question_file = tmp_path / "question.json"
    question_file.write_text(json.dumps({"payload": source(), "question": {"quiet": False}}))
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(question_file)], capture_output=True, text=True,
                          timeout=120, check=False, cwd="/", env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["vllm_version"] == "0.33.0"
    assert proc.stderr == "hello from vllm\n"
    # and alone, with the question on stdin
    proc = subprocess.run([sys.executable, payload.__file__], input='{"quiet": false}', capture_output=True, text=True,
                          timeout=120, check=False, cwd="/", env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    assert json.loads(proc.stdout)["vllm_version"] == "0.33.0", proc.stderr
