#!/usr/bin/env bash
# Remove what tools/demo.sh started: the demo hosts fleet-vllm-demo-1 and -2 and the gateway and
# monitoring host fleet-vllm-demo-gw, the hub mirror (tests/hosts/mirror.sh down), and the podman
# network fleet-vllm-net when nothing else uses it (a Molecule scenario's containers may). Safe to
# rerun. The image and the caches stay (a next tools/demo.sh reuses them; `make clean` and
# `podman rmi` remove them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
network=fleet-vllm-net

if [[ ${EUID} -ne 0 ]]; then
    echo "demo-down: run as root (rootful Podman for the test hosts)" >&2
    exit 1
fi
for name in fleet-vllm-demo-1 fleet-vllm-demo-2 fleet-vllm-demo-gw; do
    if podman container exists "${name}"; then
        podman rm --force --time 0 "${name}" >/dev/null
        echo "demo-down: removed ${name}"
    fi
done
"${root}/tests/hosts/mirror.sh" down
if podman network exists "${network}"; then
    if [[ -z $(podman ps --all --filter "network=${network}" --format '{{.Names}}') ]]; then
        podman network rm "${network}" >/dev/null
        echo "demo-down: removed network ${network}"
    else
        echo "demo-down: network ${network} kept, still used by: $(podman ps --all --filter "network=${network}" --format '{{.Names}}' | paste -sd' ')"
    fi
fi
