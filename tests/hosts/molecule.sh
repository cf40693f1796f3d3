#!/usr/bin/env bash
# Run Molecule on fleet.vllm's test hosts: builds (or reuses) the local test-host image, exports
# its name as FLEET_VLLM_TESTHOST_IMAGE for molecule/*/molecule.yml, then runs molecule from
# the repository root with the project's venv. Arguments go to molecule, e.g.
#   tests/hosts/molecule.sh test -s default
# Run as root after tests/hosts/prepare-machine.sh (Podman, runc, ulimits).
# FLEET_VLLM_MOLECULE_PREFIX (default fleet-vllm) prefixes container and network names, so two
# people on one machine can run the same scenario at once.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../.." && pwd)
venv=${FLEET_VLLM_VENV:-${root}/.venv}
export PATH=${venv}/bin:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false

FLEET_VLLM_TESTHOST_IMAGE=$("${here}/build-image.sh")
export FLEET_VLLM_TESTHOST_IMAGE

cd "${root}"
exec molecule "$@"
