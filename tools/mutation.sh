#!/usr/bin/env bash
# make mutation: mutation testing of plugins/filter and plugins/module_utils with mutmut (pinned
# in requirements-dev.txt). Each mutant is a one-token change of the code (an operator, a
# constant, a condition, a removed call); the unit tests that reach the mutated function run
# against it, and a mutant they do not notice "survives". Prints the survival rate and the
# survivors; docs/mutation.md lists and explains them. Not part of CI (see docs/mutation.md for
# how long a run takes).
#
# mutmut works on a copy, never on the checkout: the files git knows are copied to
# .cache/mutation/ansible_collections/fleet/vllm, so that mutmut names the code by the module
# path the tests import (ansible_collections.fleet.vllm.plugins...), and mutmut runs from
# .cache/mutation with the configuration below. It runs the in-process unit tests of
# tests/unit/plugins/filter and tests/unit/plugins/module_utils: a function that only modules
# reach (they run in a subprocess, unseen by mutmut) counts as "not reached by any test".
# The tests marked vllm (the real vLLM's own parser, 150 s a run) are left out: run for each
# mutant of vllm_server_argv they alone would take hours.
#   tools/mutation.sh                  # a full run, then the summary
#   tools/mutation.sh --summary-only   # the summary of the last run
#   tools/mutation.sh --check          # CI's cheaper check (tools/test.sh), about a minute: the copy
#       made as a run makes it, the tests mutmut selects run green in it (mutmut's first step:
#       a red one there stops a run before any mutant), and every function that
#       tools/mutation-equivalent.tsv explains still exists
# python3 tools/mutation-survivors.py writes docs/mutation-survivors.tsv (every survivor, its change and
# its category) and, with --table, the per-module table of docs/mutation.md from the last run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${root}/.cache/mutation
tree=ansible_collections/fleet/vllm
mutmut=${root}/.venv/bin/mutmut
[[ -x ${mutmut} ]] || { echo "mutation: ${mutmut} is missing: run make setup" >&2; exit 1; }
export ANSIBLE_INJECT_FACT_VARS=false

link_collections() {  # DIR/collections/ansible_collections/fleet/vllm -> DIR, as in a checkout
    mkdir -p "$1/collections/ansible_collections/fleet"
    ln -sfn ../../.. "$1/collections/ansible_collections/fleet/vllm"
}

make_copy() {  # the copy mutmut works on: DIR/ansible_collections/fleet/vllm
    rm -rf "$1"
    mkdir -p "$1/${tree}"
    # the tracked files and the untracked ones that are not ignored, without the collections link
    (cd "${root}" && git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' \
        | xargs -0 cp --parents -P -t "$1/${tree}")
    link_collections "$1/${tree}"
}

if [[ ${1:-} == --check ]]; then
    start=${SECONDS}
    check=${root}/.cache/mutation-check
    make_copy "${check}"
    cd "${check}"
    "${root}/.venv/bin/python" -m pytest -p no:cacheprovider -q -m "not vllm" \
        "${tree}/tests/unit/plugins/filter/" "${tree}/tests/unit/plugins/module_utils/" | tail -n 3
    "${root}/.venv/bin/python" - "${root}" <<'PY'
import ast, pathlib, sys
root = pathlib.Path(sys.argv[1])
missing = []
for line in (root / "tools" / "mutation-equivalent.tsv").read_text().splitlines():
    if not line.strip() or line.startswith("#"):
        continue
    module, function = line.split("\t")[:2]
    source = root / "plugins" / (module.replace(".", "/") + ".py")
    names = {node.name for node in ast.walk(ast.parse(source.read_text()))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))} if source.is_file() else set()
    if function.split(".")[-1].split("__")[-1] not in names:
        missing.append("%s.%s" % (module, function))
if missing:
    sys.exit("mutation: tools/mutation-equivalent.tsv explains functions that are gone: %s" % ", ".join(missing))
PY
    rm -rf "${check}"
    echo "mutation --check proved: the tests a run selects pass in its copy, and every explained survivor's function exists ($((SECONDS - start)) s)"
    exit 0
fi

if [[ ${1:-} != --summary-only ]]; then
    start=${SECONDS}
    make_copy "${work}"
    cat >"${work}/setup.cfg" <<CFG
[mutmut]
source_paths =
    ${tree}/plugins/filter/
    ${tree}/plugins/module_utils/
pytest_add_cli_args_test_selection =
    ${tree}/tests/unit/plugins/filter/
    ${tree}/tests/unit/plugins/module_utils/
pytest_add_cli_args =
    -p
    no:cacheprovider
    -q
    -m
    not vllm
also_copy =
    ${tree}/tests/
    ${tree}/plugins/
    ${tree}/pytest.ini
CFG
    link_collections "${work}/mutants/${tree}"
    cd "${work}"
    "${mutmut}" run --max-children "${FLEET_VLLM_MUTATION_JOBS:-2}" >"${work}/run.log" 2>&1 || true
    echo "mutation: mutmut ran in $((SECONDS - start)) s (log: .cache/mutation/run.log)"
fi

cd "${work}"
"${mutmut}" export-cicd-stats >/dev/null 2>&1 || true
python3 - <<'PY'
import json, sys
try:
    stats = json.load(open("mutants/mutmut-cicd-stats.json"))
except (OSError, ValueError) as exc:
    sys.exit("mutation: no results (%s): run tools/mutation.sh first" % exc)
checked = stats.get("killed", 0) + stats.get("survived", 0) + stats.get("timeout", 0) + stats.get("suspicious", 0)
print("mutation: %d mutants: %d killed, %d survived, %d timed out, %d suspicious, %d not reached by any test, %d skipped"
      % (stats.get("total", 0), stats.get("killed", 0), stats.get("survived", 0), stats.get("timeout", 0),
         stats.get("suspicious", 0), stats.get("no_tests", 0), stats.get("skipped", 0)))
if checked:
    print("mutation: survival rate %.1f%% of the %d mutants the tests reach (survived / (killed + survived + "
          "timed out + suspicious))" % (100.0 * stats.get("survived", 0) / checked, checked))
PY
echo "mutation: survivors (mutmut show NAME in ${work} for the diff):"
"${mutmut}" results 2>/dev/null | grep -v ': killed$' || true
echo "mutation: python3 tools/mutation-survivors.py > docs/mutation-survivors.tsv lists them with their category"
echo "mutation: proved what the rate above says (each mutant the tests reach, killed or surviving), in ${SECONDS} s in all"
