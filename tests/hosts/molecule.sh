#!/usr/bin/env bash
# Run Molecule on fleet.vllm's test hosts. Plain `molecule test [-s NAME | --all]` from the
# repository root works as well (molecule/shared/create.yml does the same setup in each
# scenario's create step); this wrapper does it once for all scenarios, times them and uses the
# project's venv without activating it. It sets up, then runs molecule from the repository root:
#   1. tests/hosts/prepare-machine.sh (idempotent: Podman, runc, ulimits),
#   2. the test-host image (tests/hosts/build-image.sh), exported as FLEET_VLLM_TESTHOST_IMAGE,
#   3. the wheelhouse (tests/hosts/wheelhouse.sh: the engine simulator as `vllm`, and
#      huggingface_hub), exported as FLEET_VLLM_WHEELHOUSE and mounted at /srv/wheelhouse,
#   4. the hub mirror on the network fleet-vllm-net (tests/hosts/mirror.sh up; it keeps running
#      for the next run, tools/demo-down.sh or `tests/hosts/mirror.sh down` stops it), its
#      loopback URL exported as FLEET_VLLM_MIRROR_URL for preflight's listing from here.
#
#   tests/hosts/molecule.sh test -s default      # arguments go to molecule
#   tests/hosts/molecule.sh all                  # every scenario in turn, timed; what CI runs
#   tests/hosts/molecule.sh all default kv_auto  # some of them
#   FLEET_VLLM_TEST_CPU_AMX=seen tests/hosts/molecule.sh all real_engine  # every real-engine host on AMX_MLA
#
# Run as root. FLEET_VLLM_MOLECULE_PREFIX (default fleet-vllm) prefixes the containers' names, so
# two people on one machine can run the same scenario at once; the network is always
# fleet-vllm-net (the mirror's). Never run `molecule reset`: it removes every container labelled
# owner=molecule, other people's included.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../.." && pwd)
venv=${FLEET_VLLM_VENV:-${root}/.venv}
export PATH=${venv}/bin:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false
# The scenarios, in the order `all` runs them. real_engine runs the real engine on two hosts, one
# on each MLA backend of vLLM's CPU platform: real-1 on the one this machine's processor gets,
# real-2 on the other (AMX_MLA without AMX tiles, CPU_MLA with them; the test fixture
# tests/fixtures/python/fleet_vllm_test_amx.py, molecule/real_engine/molecule.yml), so that both
# branches are proven on any machine that can run them: AMX_MLA needs AVX-512 BF16 (the fixture's
# header), and where the processor has neither that nor AMX tiles, real-2 runs the processor's own
# backend and the summary says so (the fixture's lines of the scenario's prepare step).
scenarios=(default real_engine kv_auto onboard upgrade_rollback failures gateway topology)
# The lanes that `all` runs beside the others (the chain: every scenario in no lane, one after the
# other), each started first, its scenarios one after the other, each in its own log: onboard's
# 10 minutes of an idle monitored fleet (molecule/onboard/molecule.yml) then pass while the others
# run, instead of after them. Its hosts are idle meanwhile; the checks that read the hub mirror's log
# (onboard, failures) keep to their own hosts' addresses. topology (the engine simulator, about 290 s)
# beside them too: in the chain it made CI's run 50 min on this 2-core machine (rehearsal of e294ca3,
# 3,014 s, the chain 2,939 s), over the 45 min a run may take; then kv_auto and failures, which the
# chain ran last but one (CI of 99f0170: the chain 2,757 s, the critical path of a 2,857 s run; the
# topology lane was done at 985 s, onboard at 1,368 s).
lanes=(onboard "topology kv_auto failures")

# A scenario still running after this many seconds is stopped (SIGTERM, SIGKILL a minute later) and
# fails with its log: a hang then costs one scenario's bound instead of CI's whole limit. The
# longest scenario (onboard, with its 10 idle minutes) takes about 1,500 s on 2 busy cores.
scenario_limit=${FLEET_VLLM_SCENARIO_LIMIT:-2400}

log() { printf 'molecule.sh: %s\n' "$*" >&2; }
# What a scenario proves: the first sentence of its molecule.yml's header ("# NAME: ...").
proves() {
    sed -n '2,/^#   /p' "${root}/molecule/$1/molecule.yml" | grep -v '^#   ' | sed -e 's/^# *//' | tr '\n' ' ' \
        | sed -e "s/^$1: //" -e 's/ *$//'
}

start=${SECONDS}
"${here}/prepare-machine.sh" >&2
FLEET_VLLM_TESTHOST_IMAGE=$("${here}/build-image.sh")
FLEET_VLLM_WHEELHOUSE=$("${here}/wheelhouse.sh")
export FLEET_VLLM_TESTHOST_IMAGE FLEET_VLLM_WHEELHOUSE
# mirror.sh up also creates the network fleet-vllm-net the scenarios' hosts join.
FLEET_VLLM_MIRROR_WHEELHOUSE=${FLEET_VLLM_WHEELHOUSE} "${here}/mirror.sh" up >&2
FLEET_VLLM_MIRROR_URL=$("${here}/mirror.sh" url)
export FLEET_VLLM_MIRROR_URL
log "setup in $((SECONDS - start)) s (image ${FLEET_VLLM_TESTHOST_IMAGE}, wheelhouse ${FLEET_VLLM_WHEELHOUSE}, mirror ${FLEET_VLLM_MIRROR_URL})"

cd "${root}"
if [[ ${1:-} != all ]]; then
    exec molecule "$@"
fi

shift
(($#)) && scenarios=("$@")
summary=()
why=()
failed=0
total_start=${SECONDS}
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

# One scenario's result: its summary lines and, when it failed, why (from its whole output in LOG).
record() {  # record SCENARIO STATUS SECONDS LOG
    local scenario=$1 status=$2 seconds=$3 output=$4
    if [[ ${status} -eq 0 ]]; then
        summary+=("$(printf '%-22s passed in %4d s: %s' "${scenario}" "${seconds}" "$(proves "${scenario}")")")
    else
        summary+=("$(printf '%-22s FAILED after %4d s%s' "${scenario}" "${seconds}" \
            "$([[ ${status} -eq 124 || ${status} -eq 137 ]] && echo ": stopped at its limit (FLEET_VLLM_SCENARIO_LIMIT=${scenario_limit})")")")
        why+=("  ${scenario}:" "$(python "${here}/failure_digest.py" <"${output}" || true)")
        failed=1
    fi
    # Which MLA backend the test fixture's mode gave each host that has one, or that it was not
    # applied on this processor and why (what molecule/shared/prepare.yml said of each host).
    while IFS= read -r line; do
        summary+=("$(printf '%-22s %s' '' "${line}")")
    done < <(python "${here}/failure_digest.py" --fixture <"${output}" || true)
}

# Each lane's scenarios that this run has (in the lane's order), started in the background.
declare -a lane_pids=() beside=()
for lane in "${lanes[@]}"; do
    mine=()
    for scenario in ${lane}; do
        [[ " ${scenarios[*]} " == *" ${scenario} "* ]] && mine+=("${scenario}")
    done
    ((${#mine[@]})) || continue
    beside+=("${mine[@]}")
    log "${mine[*]}: started beside the other scenarios, one after the other (their output: ${work}/SCENARIO.log, printed when the chain ends)"
    (
        for scenario in "${mine[@]}"; do
            t=${SECONDS}
            status=0
            timeout --kill-after=60 "${scenario_limit}" molecule test -s "${scenario}" >"${work}/${scenario}.log" 2>&1 || status=$?
            echo "${status} $((SECONDS - t))" >"${work}/${scenario}.result"
        done
    ) &
    lane_pids+=($!)
done
for scenario in "${scenarios[@]}"; do
    [[ " ${beside[*]} " == *" ${scenario} "* ]] && continue
    t=${SECONDS}
    status=0
    timeout --kill-after=60 "${scenario_limit}" molecule test -s "${scenario}" 2>&1 | tee "${work}/scenario.log" || status=$?
    record "${scenario}" "${status}" $((SECONDS - t)) "${work}/scenario.log"
done
for pid in "${lane_pids[@]}"; do
    wait "${pid}" || true
done
for scenario in "${beside[@]}"; do
    read -r status seconds <"${work}/${scenario}.result" || { status=1; seconds=0; }
    log "${scenario}: its output (it ran beside the others)"
    cat "${work}/${scenario}.log"
    record "${scenario}" "${status}" "${seconds}" "${work}/${scenario}.log"
done
log "scenarios:"
printf '  %s\n' "${summary[@]}" >&2
# What the real engine's CPU backends depend on (AMX_MLA or CPU_MLA, and whether AMX_MLA can run):
# in the summary, so that a failure there can be read against the processor it met.
log "processor: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); flags:$(
    for flag in avx2 avx512f avx512_bf16 amx_tile; do
        grep -qw "${flag}" /proc/cpuinfo && printf ' %s' "${flag}" || printf ' no-%s' "${flag}"
    done)"
if ((${#why[@]})); then
    # What failed, in a few lines: the step, the failed task or assertion (the whole output is above).
    log "why:"
    printf '%s\n' "${why[@]}" >&2
fi
log "all scenarios in $((SECONDS - total_start)) s (setup included: $((SECONDS - start)) s)"
exit "${failed}"
