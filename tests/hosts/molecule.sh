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
#   tests/hosts/molecule.sh all real_engine@amx-flip  # the real engine on the other CPU backend
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
# The scenarios, in the order `all` runs them. NAME@amx-MODE runs NAME with
# FLEET_VLLM_TEST_CPU_AMX=MODE: real_engine@amx-flip is the real engine on the MLA backend this
# machine's processor does not get (AMX_MLA without AMX tiles, CPU_MLA with them; the test fixture
# tests/fixtures/python/fleet_vllm_test_amx.py), so that both branches are proven on any machine
# that can run them: AMX_MLA needs AVX-512 BF16 (the fixture's header), and where the processor has
# neither that nor AMX tiles, real_engine@amx-flip is not run and the summary says why.
scenarios=(default real_engine real_engine@amx-flip kv_auto onboard upgrade_rollback failures gateway)

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
scenario_log=$(mktemp)
trap 'rm -f "${scenario_log}"' EXIT
for scenario in "${scenarios[@]}"; do
    t=${SECONDS}
    name=${scenario%%@*}
    amx=${FLEET_VLLM_TEST_CPU_AMX:-}
    [[ ${scenario} == *@amx-* ]] && amx=${scenario#*@amx-}
    # A branch this processor cannot run (AMX_MLA without AVX-512 BF16: the fixture says why) is
    # not run, and the summary says so; the scenario proves the branch the processor takes.
    if [[ ${scenario} == *@amx-* ]]; then
        rc=0
        cannot=$(python3 "${root}/tests/fixtures/python/fleet_vllm_test_amx.py" "${amx}" 2>&1 >/dev/null) || rc=$?
        if ((rc == 3)); then
            summary+=("$(printf '%-22s not run on this processor: %s' "${scenario}" "${cannot}")")
            continue
        elif ((rc)); then
            summary+=("$(printf '%-22s FAILED: %s' "${scenario}" "${cannot}")")
            failed=1
            continue
        fi
    fi
    if FLEET_VLLM_TEST_CPU_AMX=${amx} molecule test -s "${name}" 2>&1 | tee "${scenario_log}"; then
        summary+=("$(printf '%-22s passed in %4d s: %s' "${scenario}" $((SECONDS - t)) "$(proves "${name}")")")
    else
        summary+=("$(printf '%-22s FAILED after %4d s' "${scenario}" $((SECONDS - t)))")
        why+=("  ${scenario}:" "$(python "${here}/failure_digest.py" <"${scenario_log}" || true)")
        failed=1
    fi
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
