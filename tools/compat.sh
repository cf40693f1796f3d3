#!/usr/bin/env bash
# Test the collection with another ansible-core than the pinned one: `ansible-test sanity` of
# that core (tools/sanity.sh) and the unit tests (pytest tests/unit) run by it, in a venv of its
# own under .cache/compat-<version>. `make test-compat` runs it for the oldest and the newest
# ansible-core the collection supports (meta/runtime.yml, docs/ansible-compat.md):
#
#   tools/compat.sh 2.16.19 python3.11      # VERSION PYTHON (a Python that core runs on)
#   tools/compat.sh 2.21.5 python3.12 --integration   # also tests/integration (slower)
#   tools/compat.sh 2.16.19 python3.10 --modules      # only the modules' tests, no sanity (CI, make test)
#
# --modules is CI's cheaper check (tools/test.sh): every module run by that core's
# AnsibleModule (module_utils.basic: backups, atomic moves, run_command, argument parsing), the
# part of the core a module meets on a host, where the oldest core failed before (2.16's
# backup_local on a symbolic link). Sanity and the controller-side tests stay in make test-compat.
#
# The tests that ask the real vLLM are left out (marker vllm): they do not depend on the core.
# ansible.posix (the json callback the integration tests read) comes from the project venv's
# `ansible` package, whatever core runs it.
#   tools/compat.sh oldest [--modules]       # the ends of the supported range, defined here only
#   tools/compat.sh newest
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The supported range's ends (meta/runtime.yml requires_ansible, docs/ansible-compat.md), each with
# the oldest Python that core runs on.
OLDEST=(2.16.19 python3.10)
NEWEST=(2.21.5 python3.12)
case ${1:-} in
    oldest) set -- "${OLDEST[@]}" "${@:2}" ;;
    newest) set -- "${NEWEST[@]}" "${@:2}" ;;
esac
version=${1:?usage: tools/compat.sh oldest|newest|ANSIBLE_CORE_VERSION PYTHON [--integration|--modules]}
python=${2:?usage: tools/compat.sh oldest|newest|ANSIBLE_CORE_VERSION PYTHON [--integration|--modules]}
mode=${3:-}
case ${mode} in ""|--integration|--modules) ;; *) echo "tools/compat.sh: unknown option ${mode} (--integration, --modules)" >&2; exit 2 ;; esac
venv=${root}/.cache/compat-${version}
pin() { grep -E "^$1==" "${root}/requirements-dev.txt"; }
log() { printf 'compat %s: %s\n' "${version}" "$*" >&2; }

# python3.10 may be a pyenv shim that only answers when that version is selected: use the
# interpreter itself.
if ! "${python}" -c '' 2>/dev/null; then
    found=$(find "${PYENV_ROOT:-${HOME}/.pyenv}/versions" -maxdepth 3 -path "*/${python#python}.*/bin/${python}" 2>/dev/null | sort -V | tail -n1)
    [[ -n ${found} ]] || { log "no ${python} on this machine (apt, pyenv, or the python.org builds)"; exit 1; }
    python=${found}
fi

start=${SECONDS}
if [[ ! -f ${venv}/.complete ]]; then
    rm -rf "${venv}"
    "${python}" -m venv "${venv}"
    "${venv}/bin/pip" install --quiet --disable-pip-version-check "ansible-core==${version}" \
        "$(pin pytest)" "$(pin huggingface_hub)" "$(pin jmespath)"
    touch "${venv}/.complete"
    log "venv made in $((SECONDS - start)) s"
fi
"${venv}/bin/ansible" --version | sed -n 1p >&2  # sed reads it all: head would close the pipe early (BrokenPipeError, a failure under pipefail)

cd "${root}"
export ANSIBLE_INJECT_FACT_VARS=false
site=$(echo "${root}"/.venv/lib/python3*/site-packages)
export ANSIBLE_COLLECTIONS_PATH=${root}/collections:${site}

proved=()
if [[ ${mode} != --modules ]]; then
    t=${SECONDS}
    FLEET_VLLM_ANSIBLE_CORE=${version} FLEET_VLLM_PYTHON=${python} tools/sanity.sh
    log "sanity passed in $((SECONDS - t)) s"
    proved+=("ansible-test sanity of ${version} passed ($((SECONDS - t)) s)")
fi

t=${SECONDS}
paths=(tests/unit)
[[ ${mode} == --integration ]] && paths+=(tests/integration)
[[ ${mode} == --modules ]] && paths=(tests/unit/plugins/modules)
"${venv}/bin/python" -m pytest -q -p no:cacheprovider -m "not vllm" "${paths[@]}"
proved+=("pytest ${paths[*]} passed with ${version} on $("${venv}/bin/python" -V 2>&1) ($((SECONDS - t)) s)")
summary=$(printf '%s; ' "${proved[@]}")
log "proved: ${summary%; }; all in $((SECONDS - start)) s"
