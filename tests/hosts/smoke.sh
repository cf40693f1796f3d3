#!/usr/bin/env bash
# Smoke test of the test-host machinery, by hand (not part of the test suite yet):
#   1. build (or reuse) the image with build-image.sh,
#   2. start two containers with systemd as PID 1 on a podman network (names resolve),
#   3. wait for `systemctl is-system-running` = running (degraded fails, naming the units),
#   4. `ansible all -m ansible.builtin.ping`, then smoke-playbook.yml (a systemd unit serving
#      HTTP, peers fetched by name) through containers.podman.podman AND through
#      community.docker.nsenter pointed at each container's PID 1,
#   5. the unit's port, published on 127.0.0.1, answers from this machine,
#   6. remove the containers and the network.
# Prints timings. Exits non-zero on any failure. Run as root after prepare-machine.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../.." && pwd)
venv=${FLEET_VLLM_VENV:-${root}/.venv}
export PATH=${venv}/bin:${PATH}
export ANSIBLE_INJECT_FACT_VARS=false

run_id=fvs$$
network=${run_id}-net
hosts=("${run_id}-a" "${run_id}-b")
guest_port_podman=8000
guest_port_nsenter=8001
workdir=$(mktemp -d)

log() { printf 'smoke: %s\n' "$*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
    local rc=$?
    for h in "${hosts[@]}"; do
        podman rm --force --time 0 "${h}" >/dev/null 2>&1 || true
    done
    podman network rm --force "${network}" >/dev/null 2>&1 || true
    rm -rf "${workdir}"
    if ((rc)); then log "FAILED (rc=${rc})"; fi
    exit "${rc}"
}
trap cleanup EXIT

t=$(now)
image=$("${here}/build-image.sh")
log "image ${image} ready in $(elapsed "${t}" "$(now)") s"

podman network create "${network}" >/dev/null

# Systemd as PID 1 without --privileged: Podman sees /sbin/init and sets up /run, /tmp,
# /var/log/journal as tmpfs and the cgroup mounts itself (--systemd=true is the default;
# `always` makes that explicit whatever the command is called).
t=$(now)
for h in "${hosts[@]}"; do
    podman run --detach --name "${h}" --hostname "${h}" --network "${network}" \
        --systemd=always \
        --publish "127.0.0.1::${guest_port_podman}" \
        --publish "127.0.0.1::${guest_port_nsenter}" \
        "${image}" >/dev/null
done
for h in "${hosts[@]}"; do
    state=
    for _ in $(seq 1 120); do
        state=$(podman exec "${h}" systemctl is-system-running 2>/dev/null || true)
        case ${state} in running | degraded) break ;; esac
        sleep 0.25
    done
    if [[ ${state} != running ]]; then
        log "${h}: systemctl is-system-running = '${state}'"
        podman exec "${h}" systemctl --failed --no-pager >&2 || true
        exit 1
    fi
done
log "2 hosts booted to 'running' in $(elapsed "${t}" "$(now)") s"

pid_of() { podman container inspect --format '{{.State.Pid}}' "$1"; }

# One inventory per connection. The nsenter one needs the PID of each container's systemd
# (it changes on every start, so the inventory is written after the containers start).
{
    echo "all:"
    echo "  vars:"
    echo "    ansible_connection: containers.podman.podman"
    echo "    ansible_python_interpreter: /usr/bin/python3"
    echo "    smoke_connection_label: podman"
    echo "    smoke_port: ${guest_port_podman}"
    echo "  hosts:"
    for h in "${hosts[@]}"; do echo "    ${h}: {}"; done
} >"${workdir}/podman.yml"
{
    echo "all:"
    echo "  vars:"
    echo "    ansible_connection: community.docker.nsenter"
    echo "    ansible_python_interpreter: /usr/bin/python3"
    echo "    smoke_connection_label: nsenter"
    echo "    smoke_port: ${guest_port_nsenter}"
    echo "  hosts:"
    for h in "${hosts[@]}"; do
        echo "    ${h}:"
        echo "      ansible_nsenter_pid: $(pid_of "${h}")"
    done
} >"${workdir}/nsenter.yml"

cd "${root}"
declare -A per_task
for conn in podman nsenter; do
    inv=${workdir}/${conn}.yml
    t=$(now)
    ansible -i "${inv}" all -m ansible.builtin.ping -o >&2
    log "${conn}: ad-hoc ping of 2 hosts in $(elapsed "${t}" "$(now)") s"

    t=$(now)
    ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks \
        ansible-playbook -i "${inv}" "${here}/smoke-playbook.yml" >"${workdir}/${conn}.log" 2>&1 ||
        { cat "${workdir}/${conn}.log" >&2; exit 1; }
    log "${conn}: smoke play ($(grep -c '^TASK \[' "${workdir}/${conn}.log") tasks) in $(elapsed "${t}" "$(now)") s"
    # profile_tasks summary lines look like: "Stat /etc/os-release (timing 3) ---- 0.42s"
    per_task[${conn}]=$(grep -E '\(timing [0-9]\) -+ [0-9.]+s$' "${workdir}/${conn}.log" |
        sed -E 's/.* ([0-9.]+)s$/\1/' | awk '{ s += $1; n++ } END { if (n) printf "%.2f", s / n }')
    grep -E '^(Start the unit|Install the unit|Ping the host) ' "${workdir}/${conn}.log" | sed 's/^/  /' >&2 || true
    log "${conn}: mean time per cheap task (2 hosts, forks in parallel): ${per_task[${conn}]} s"
done

# The units' ports, published on 127.0.0.1, answer from this machine.
for h in "${hosts[@]}"; do
    for conn in podman nsenter; do
        guest_port_var=guest_port_${conn}
        hostport=$(podman port "${h}" "${!guest_port_var}/tcp" | head -n1)
        body=$(curl --silent --show-error --fail --max-time 5 "http://${hostport}/")
        if [[ ${body} != "${h} via ${conn}" ]]; then
            log "${h}: http://${hostport}/ answered '${body}'"
            exit 1
        fi
        log "${h}: ${conn} unit answers on ${hostport}"
    done
done

log "OK: podman $(printf '%s' "${per_task[podman]}") s/task, nsenter $(printf '%s' "${per_task[nsenter]}") s/task"
