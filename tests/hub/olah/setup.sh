#!/usr/bin/env bash
# Build olah's own venv (and the wheelhouse it is installed from), keyed on requirements.txt.
#
#   tests/hub/olah/setup.sh              # -> prints the venv's path (default .cache/olah-venv)
#   tests/hub/olah/setup.sh --wheelhouse # -> only the wheelhouse; prints its path
#
# olah (PyPI, the Hugging Face mirror server sites run) needs huggingface_hub>=1.27 and a recent
# FastAPI stack; it gets a venv of its own, never the collection's .venv. Both the venv and the
# wheelhouse are made with Debian's /usr/bin/python3 (3.11, the same Python as the test-host
# image), so tests/hosts/mirror.sh can install the same wheels into the site-mirror container
# with `pip install --no-index --find-links` (the container never needs PyPI).
#
# Idempotent and cheap when nothing changed: the wheelhouse is
# .cache/wheelhouse/olah/<hash>/ (hash = sha256 of requirements.txt, first 12 hex) with a
# .complete stamp; the venv records the hash it was built from in .fleet-vllm-requirements.
# A different hash rebuilds (about 20 s: 54 wheels, 16 MB, from PyPI; then ~10 s to install).
#
# Environment: FLEET_VLLM_OLAH_VENV (venv path), FLEET_VLLM_OLAH_WHEELHOUSE (wheelhouse root),
# FLEET_VLLM_OLAH_PYTHON (interpreter, default /usr/bin/python3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../../.." && pwd)
requirements=${here}/requirements.txt
python=${FLEET_VLLM_OLAH_PYTHON:-/usr/bin/python3}
venv=${FLEET_VLLM_OLAH_VENV:-${root}/.cache/olah-venv}
wheel_root=${FLEET_VLLM_OLAH_WHEELHOUSE:-${root}/.cache/wheelhouse/olah}

log() { printf 'olah-setup: %s\n' "$*" >&2; }

hash=$(sha256sum "${requirements}" | cut -c1-12)
wheelhouse=${wheel_root}/${hash}

build_wheelhouse() {
    if [[ -f ${wheelhouse}/.complete ]]; then
        return 0
    fi
    mkdir -p "${wheel_root}"
    exec 8>"${wheel_root}/.lock"
    flock 8
    if [[ -f ${wheelhouse}/.complete ]]; then
        return 0
    fi
    log "building wheelhouse ${wheelhouse} from PyPI"
    local start=${SECONDS} tmp
    tmp=$(mktemp -d "${wheel_root}/.build-XXXXXX")
    # --no-deps: requirements.txt is the complete, pinned set (a pip freeze); the --no-index
    # installs below prove nothing is missing. `pip wheel` also builds any sdist into a wheel.
    if ! "${python}" -m pip wheel --quiet --disable-pip-version-check --no-deps \
        --requirement "${requirements}" --wheel-dir "${tmp}" 2> >(grep -v '^WARNING: Location' >&2); then
        rm -rf "${tmp}"
        log "pip wheel failed"
        return 1
    fi
    cp "${requirements}" "${tmp}/requirements.txt"
    touch "${tmp}/.complete"
    rm -rf "${wheelhouse}"
    mv "${tmp}" "${wheelhouse}"
    log "wheelhouse: $(find "${wheelhouse}" -name '*.whl' | wc -l) wheels, $(du -sh "${wheelhouse}" | cut -f1), $((SECONDS - start)) s"
}

build_venv() {
    local stamp=${venv}/.fleet-vllm-requirements
    if [[ -f ${stamp} && $(cat "${stamp}") == "${hash}" && -x ${venv}/bin/python ]]; then
        return 0
    fi
    mkdir -p "$(dirname "${venv}")"
    exec 7>"${venv}.lock"
    flock 7
    if [[ -f ${stamp} && $(cat "${stamp}") == "${hash}" && -x ${venv}/bin/python ]]; then
        return 0
    fi
    local start=${SECONDS}
    log "building ${venv} (requirements ${hash})"
    rm -rf "${venv}"
    "${python}" -m venv "${venv}"
    # Only the wheelhouse: no index, and none of this machine's pip configuration (its
    # find-links, extra indexes and constraints come from pip.conf and PIP_* variables).
    local unset_pip=()
    local name
    for name in ${!PIP_@}; do unset_pip+=(-u "${name}"); done
    env "${unset_pip[@]}" PIP_CONFIG_FILE=/dev/null \
        "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-index --find-links "${wheelhouse}" --requirement "${requirements}"
    "${venv}/bin/python" -c 'import olah.server' 2>/dev/null || {
        log "olah does not import in ${venv}"
        return 1
    }
    printf '%s\n' "${hash}" >"${stamp}"
    log "venv ready in $((SECONDS - start)) s"
}

case ${1:-} in
--wheelhouse)
    build_wheelhouse
    printf '%s\n' "${wheelhouse}"
    ;;
"")
    build_wheelhouse
    build_venv
    printf '%s\n' "${venv}"
    ;;
*)
    echo "usage: $0 [--wheelhouse]" >&2
    exit 2
    ;;
esac
