#!/usr/bin/env bash
# The collection in an execution environment, as AWX / Automation Platform runs it:
#
#   1. the collection tarball (ansible-galaxy collection build);
#   2. an EE image built by ansible-builder with Podman (tests/ee/execution-environment.yml) on a
#      base image made here (tests/ee/build-base-image.sh): the EE installs fleet.vllm from the
#      tarball and its dependencies from the collection's meta/execution-environment.yml;
#   3. two test hosts (Podman containers with systemd, tests/hosts), the hub mirror and the
#      wheelhouse, as the Molecule scenarios and the demo have them, with the fixture nvidia-smi
#      (molecule/shared/prepare.yml);
#   4. a project directory as an AWX project holds it - deploy.yml importing fleet.vllm.deploy, an
#      inventory, the demo fleet's group_vars - and `ansible-navigator run deploy.yml --mode
#      stdout` in the EE against the two hosts; the playbook and roles come from the EE, not from
#      this checkout;
#   5. checks: the run succeeded on both hosts and used the EE's collection; each host's front door,
#      as a client on this machine meets it, refuses a request without the key (401) and answers
#      /health, /v1/models and a chat completion with it; a second run reports changed=0. Where the
#      front door listens and with what key are asked of the roles (tests/hosts/endpoint.sh:
#      fleet.vllm.vllm_gateway's tasks_from endpoint, with the project's inventory), never
#      repeated here: CI runs the same question (tests/integration/test_harness_endpoints.py).
#
#   make test-ee        # as root; about 4 minutes from cold on a 2-core VM (images built), 2 with them cached
#
# The EE reaches the test hosts with community.docker's nsenter connection (the hosts have no
# sshd): the EE container runs with --pid=host --privileged (to enter the hosts' namespaces)
# and --network=host (the mirror's published port, for preflight's size check from the
# controller). Those options are for these test hosts only; a real EE reaches its hosts over ssh.
# FLEET_VLLM_EE_PREFIX (default fleet-vllm-ee) prefixes the test hosts' names.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "${root}"
hosts_dir=${root}/tests/hosts
prefix=${FLEET_VLLM_EE_PREFIX:-fleet-vllm-ee}
work=${root}/.cache/ee
ee_venv=${root}/.cache/ee-venv
image_repo=localhost/fleet-vllm-ee
hosts=("${prefix}-1" "${prefix}-2")
start=${SECONDS}
# shellcheck source=tests/hosts/endpoint.sh
. "${hosts_dir}/endpoint.sh"

say() { printf '\n== test-ee: %s\n' "$*"; }
fail() { printf 'test-ee: FAILED: %s\n' "$*" >&2; exit 1; }

[[ ${EUID} -eq 0 ]] || fail "run as root (rootful Podman)"
[[ -x ${root}/.venv/bin/ansible-playbook ]] || tools/bootstrap.sh
export PATH=${root}/.venv/bin:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false

say "tools: ansible-builder and ansible-navigator (tests/ee/requirements.txt) in ${ee_venv}"
if [[ ! -f ${ee_venv}/.complete ]] || ! cmp -s tests/ee/requirements.txt "${ee_venv}/.complete"; then
    rm -rf "${ee_venv}"
    python3 -m venv "${ee_venv}"
    "${ee_venv}/bin/pip" install --quiet --disable-pip-version-check -r tests/ee/requirements.txt
    cp tests/ee/requirements.txt "${ee_venv}/.complete"
fi

say "machine, test-host image, wheelhouse, hub mirror"
"${hosts_dir}/prepare-machine.sh" >/dev/null
# ansible-navigator refuses to start a Podman EE without /dev/mqueue ("Execution environment
# support while using podman requires a '/dev/mqueue/' directory"); this VM has none.
if [[ ! -d /dev/mqueue ]]; then
    mkdir /dev/mqueue
    mount -t mqueue mqueue /dev/mqueue 2>/dev/null || true
fi
host_image=$("${hosts_dir}/build-image.sh")
wheelhouse=$("${hosts_dir}/wheelhouse.sh")
FLEET_VLLM_MIRROR_WHEELHOUSE=${wheelhouse} "${hosts_dir}/mirror.sh" up >/dev/null
FLEET_VLLM_MIRROR_URL=$("${hosts_dir}/mirror.sh" url)
export FLEET_VLLM_MIRROR_URL

say "1. the collection tarball"
rm -rf "${work}/build"
mkdir -p "${work}/build"
ansible-galaxy collection build --output-path "${work}/build" . >/dev/null
tarball=$(cd "${work}/build" && ls fleet-vllm-*.tar.gz)

say "2. the EE image (ansible-builder, Podman)"
t=${SECONDS}
base_image=$(tests/ee/build-base-image.sh)
sed -e "s|@BASE_IMAGE@|${base_image}|" -e "s|@TARBALL@|${tarball}|g" tests/ee/execution-environment.yml \
    >"${work}/build/execution-environment.yml"
site=$(echo "${root}"/.venv/lib/python3*/site-packages)
cp -a "${site}/ansible_collections/community/docker" "${work}/build/community.docker"
tag=$({ cat "${work}/build/execution-environment.yml"; tar -xOzf "${work}/build/${tarball}" FILES.json; } \
      | sha256sum | cut -c1-12)
ee_image=${image_repo}:${tag}
if podman image exists "${ee_image}"; then
    echo "test-ee: ${ee_image} exists"
else
    (cd "${work}/build" && "${ee_venv}/bin/ansible-builder" build --container-runtime podman \
        --file execution-environment.yml --context "${work}/build/context" --tag "${ee_image}" --verbosity 1)
fi
echo "test-ee: EE image ${ee_image} ready in $((SECONDS - t)) s"
podman run --rm "${ee_image}" ansible-galaxy collection list fleet.vllm | grep -q '^fleet\.vllm ' \
    || fail "fleet.vllm is not installed in ${ee_image}"

say "3. test hosts ${hosts[*]}"
# The project's inventory (as an AWX project holds it): the demo fleet's group_vars, the hosts
# (their nsenter PIDs are added once they run). Its front door port, key and model come from the
# roles, asked with this inventory.
project=${work}/project
rm -rf "${project}"
mkdir -p "${project}/inventory/group_vars"
cp inventories/demo/group_vars/vllm_servers.yml "${project}/inventory/group_vars/"
project_inventory() {  # project_inventory [with-pids]
    echo "all:"
    echo "  children:"
    echo "    vllm_servers:"
    echo "      vars:"
    echo "        ansible_connection: community.docker.nsenter"
    echo "      hosts:"
    for name in "${hosts[@]}"; do
        echo "        ${name}:"
        echo "          ansible_host: ${name}"
        [[ -n ${1:-} ]] && echo "          ansible_nsenter_pid: $(podman container inspect --format '{{.State.Pid}}' "${name}")"
    done
    return 0
}
project_inventory >"${project}/inventory/hosts.yml"
cleanup() { podman rm --force --ignore --time 0 "${hosts[@]}" >/dev/null 2>&1 || true; rm -rf "${work}/endpoints"; }
trap cleanup EXIT
cleanup
endpoints_ask "${project}/inventory" "${work}/endpoints" || fail "asking the roles where the front doors listen"
port=$(endpoint_field "${work}/endpoints" "${hosts[0]}" port)
echo "test-ee: the roles put each host's front door on port ${port} ($(endpoint_field "${work}/endpoints" "${hosts[0]}" scheme))"
for name in "${hosts[@]}"; do
    podman run --detach --name "${name}" --hostname "${name}" --network fleet-vllm-net \
        --systemd=always --volume "${wheelhouse}:/srv/wheelhouse:ro" --publish "127.0.0.1::${port}" \
        --label owner=fleet-vllm-test-ee "${host_image}" /sbin/init >/dev/null
done
{
    echo "all:"
    echo "  children:"
    echo "    vllm_servers:"
    echo "      vars:"
    echo "        ansible_connection: fleet_nsenter"
    echo "      hosts:"
    for name in "${hosts[@]}"; do
        echo "        ${name}:"
        echo "          ansible_host: ${name}"
    done
} >"${work}/hosts-harness.yml"
# The fixtures a GPU host has and a container lacks, from this checkout (the test harness).
ansible-playbook molecule/shared/prepare.yml -i "${work}/hosts-harness.yml" >"${work}/prepare.log" 2>&1 \
    || { tail -n 40 "${work}/prepare.log"; fail "preparing the test hosts"; }

say "4. ansible-navigator run deploy.yml in the EE"
# The project, as an AWX project holds it: no collection inside, the EE brings fleet.vllm.
cat >"${project}/deploy.yml" <<'EOF'
---
- name: Deploy vLLM with the collection installed in the execution environment
  ansible.builtin.import_playbook: fleet.vllm.deploy
EOF
cat >"${project}/ansible.cfg" <<'EOF'
[defaults]
inject_facts_as_vars = false
interpreter_python = auto_silent
callback_result_format = yaml
[connection]
pipelining = true
EOF
project_inventory with-pids >"${project}/inventory/hosts.yml"

navigate() {
    (cd "${project}" && "${ee_venv}/bin/ansible-navigator" run deploy.yml -i inventory/hosts.yml \
        --mode stdout --execution-environment true --container-engine podman \
        --execution-environment-image "${ee_image}" --pull-policy never \
        --container-options=--pid=host --container-options=--privileged --container-options=--network=host \
        --pass-environment-variable FLEET_VLLM_MIRROR_URL \
        --playbook-artifact-enable false --log-file "${work}/navigator.log")
}
t=${SECONDS}
navigate | tee "${work}/run1.log" | tail -n 8
deploy_seconds=$((SECONDS - t))
recap() { sed -n '/PLAY RECAP/,$p' "$1" | grep -E "^${prefix}-[12] "; }
[[ $(recap "${work}/run1.log" | grep -c 'failed=0') -eq 2 ]] || fail "the first run did not succeed on both hosts"
grep -q "${root}" "${work}/run1.log" && fail "the run used files of the checkout, not the EE's collection"

say "5. the front doors, as a client meets them, and a second run that changes nothing"
for name in "${hosts[@]}"; do
    url=$(endpoint_field "${work}/endpoints" "${name}" scheme)://$(podman port "${name}" "${port}/tcp")
    problem=$(endpoint_probe "${url}" "$(endpoint_field "${work}/endpoints" "${name}" api_key)" \
        "$(endpoint_field "${work}/endpoints" "${name}" model)") || fail "${name}: ${problem}"
    echo "test-ee: ${name}'s front door (${url}) refuses a request without the key, answers /health, /v1/models and a chat completion with it"
done
t=${SECONDS}
navigate >"${work}/run2.log"
rerun_seconds=$((SECONDS - t))
recap "${work}/run2.log"
[[ $(recap "${work}/run2.log" | grep -c 'changed=0 .*failed=0') -eq 2 ]] || fail "the second run changed something"

say "passed in $((SECONDS - start)) s"
echo "test-ee proved: the collection tarball builds and installs into an EE image (${ee_image}, ansible-builder + Podman);"
echo "  ansible-navigator run deploy.yml in it, with the EE's fleet.vllm and not this checkout's, deployed ${#hosts[@]} hosts (${deploy_seconds} s);"
echo "  each front door refuses a request without the key and serves /health, /v1/models and a chat completion with it;"
echo "  a second run changed nothing (${rerun_seconds} s)."
