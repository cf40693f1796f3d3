#!/usr/bin/env bash
# The site's Hugging Face mirror for the test fleet: olah, offline, over a synthetic
# Kimi-K2.5-NVFP4-shaped git repository, in a container the test hosts reach by name.
#
#   tests/hosts/mirror.sh up           # start (or reuse) it; prints olah's loopback URL
#   tests/hosts/mirror.sh url          # http://127.0.0.1:<port> of olah (published port)
#   tests/hosts/mirror.sh url wheels   # http://127.0.0.1:<port> of the wheel server
#   tests/hosts/mirror.sh internal-url [wheels]  # the same as the test hosts see it
#   tests/hosts/mirror.sh log          # olah's request log: METHOD TARGET STATUS BYTES CLIENT
#   tests/hosts/mirror.sh down         # remove the container (and the network if unused)
#
# What `up` runs: a container named fleet-vllm-mirror from the test-host image
# (tests/hosts/build-image.sh) on the podman network fleet-vllm-net, with systemd as PID 1 and
# two units:
#   fleet-vllm-olah.service     olah 0.5.4 (tests/hub/olah/serve.py: olah + a request log) on
#                               port 8090, offline, mirrors-path /srv/mirrors, which holds the
#                               bare git repo models/nvidia/Kimi-K2.5-NVFP4 written by
#                               tests/hub/synthetic_repo.py (deterministic: same commit sha on
#                               every machine), and the tiny DeepSeek-V3 (MLA) checkpoints the
#                               real CPU engine serves, models/fleet-vllm/tiny-deepseek-v3-mla and
#                               models/fleet-vllm/tiny-deepseek-v3-mla-fp8kv (tests/hub/tiny_mla.py,
#                               deterministic too);
#   fleet-vllm-wheels.service   python3 -m http.server on port 8091 serving /srv/wheelhouse, a
#                               pip --find-links URL; its files are copied from the machine
#                               directory $FLEET_VLLM_MIRROR_WHEELHOUSE when that is set (on
#                               every `up`, when the directory's listing changed).
# Both ports are published on 127.0.0.1 (random host ports: `url` prints them). Test hosts on the
# network use http://fleet-vllm-mirror:8090 and http://fleet-vllm-mirror:8091/ (pip needs
# `--trusted-host fleet-vllm-mirror` with that plain-HTTP --find-links URL).
#
# olah is not installed from PyPI inside the container: the first `up` builds, from the base
# image, a derived image localhost/fleet-vllm-mirror:<key> with git (GitPython needs it; from
# Debian's mirror with apt, skipped when the base image has git) and olah in /opt/olah,
# installed with `pip install --no-index` from the wheelhouse that tests/hub/olah/setup.sh
# builds on this machine (.cache/wheelhouse/olah/<requirements hash>). <key> covers the base
# image, the requirements, serve.py, the rendered config, the units and recipe_version. Later
# `up`s reuse the image, and a running container with the same key (and the same synthetic
# repo) is reused as it is.
#
# Environment: FLEET_VLLM_MIRROR_NAME (fleet-vllm-mirror), FLEET_VLLM_MIRROR_NETWORK
# (fleet-vllm-net), FLEET_VLLM_MIRROR_WHEELHOUSE (optional), FLEET_VLLM_MIRROR_SHARDS (4),
# FLEET_VLLM_MIRROR_SHARD_BYTES (262144). Run as root after tests/hosts/prepare-machine.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../.." && pwd)
hub=${root}/tests/hub
name=${FLEET_VLLM_MIRROR_NAME:-fleet-vllm-mirror}
network=${FLEET_VLLM_MIRROR_NETWORK:-fleet-vllm-net}
shards=${FLEET_VLLM_MIRROR_SHARDS:-4}
shard_bytes=${FLEET_VLLM_MIRROR_SHARD_BYTES:-262144}
wheel_src=${FLEET_VLLM_MIRROR_WHEELHOUSE:-}
olah_port=8090
wheels_port=8091
image_repo=localhost/fleet-vllm-mirror
state_dir=${root}/.cache/mirror
python=/usr/bin/python3

log() { printf 'mirror: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

published() { # $1 = container port -> http://127.0.0.1:<host port>
    local hostport
    hostport=$(podman port "${name}" "$1/tcp" 2>/dev/null | head -n1) ||
        die "container ${name} is not running (tests/hosts/mirror.sh up)"
    [[ -n ${hostport} ]] || die "container ${name} publishes no port $1 (tests/hosts/mirror.sh up)"
    printf 'http://%s\n' "${hostport/0.0.0.0/127.0.0.1}"
}

# What goes into the derived image besides olah's wheels. Bump recipe_version when the build
# steps below change: the image key is made of these, not of this whole script, so editing the
# rest of it does not replace a mirror others are using.
recipe_version=2
olah_unit="[Unit]
Description=olah, offline Hugging Face mirror over /srv/mirrors (fleet.vllm test site mirror)
After=network.target

[Service]
WorkingDirectory=/var/lib/olah
ExecStart=/opt/olah/bin/python /opt/fleet-vllm-olah/serve.py --config /etc/olah/configs.toml --log-dir /var/log/olah --request-log /var/log/olah/requests.log
Restart=on-failure

[Install]
WantedBy=multi-user.target"
wheels_unit="[Unit]
Description=Wheel directory for pip --find-links (fleet.vllm test site mirror)
After=network.target

[Service]
ExecStart=/usr/bin/python3 -m http.server ${wheels_port} --bind 0.0.0.0 --directory /srv/wheelhouse
Restart=on-failure

[Install]
WantedBy=multi-user.target"

# A derived image with git and olah installed (no PyPI inside the container: the wheels come
# from this machine's wheelhouse). Prints its name.
build_mirror_image() {
    local base=$1 wheelhouse=$2 config key image builder
    config=$("${python}" "${hub}/olah/run.py" --render-config --host 0.0.0.0 --port "${olah_port}" \
        --mirrors /srv/mirrors --repos-path /var/lib/olah/repos --mirror-netloc "${name}:${olah_port}")
    key=$({
        printf '%s\n' "${recipe_version}" "${base}" "${config}" "${olah_unit}" "${wheels_unit}"
        cat "${hub}/olah/requirements.txt" "${hub}/olah/serve.py"
    } | sha256sum | cut -c1-12)
    image=${image_repo}:${key}
    if podman image exists "${image}"; then
        printf '%s\n' "${image}"
        return 0
    fi
    local start=${SECONDS}
    log "building ${image} from ${base} (git + olah from ${wheelhouse})"
    builder=${name}-build-$$
    podman rm --force --time 0 "${builder}" >/dev/null 2>&1 || true
    # No systemd in the builder: nothing runs but what is exec'd, and the commit stays clean.
    podman run --detach --name "${builder}" --systemd=false "${base}" sleep infinity >/dev/null
    # shellcheck disable=SC2064
    trap "podman rm --force --time 0 '${builder}' >/dev/null 2>&1 || true" EXIT
    podman exec "${builder}" mkdir -p /opt/fleet-vllm-olah/wheels /srv/mirrors /srv/wheelhouse \
        /var/lib/olah /var/log/olah /etc/olah
    podman cp "${wheelhouse}/." "${builder}:/opt/fleet-vllm-olah/wheels/"
    podman cp "${hub}/olah/serve.py" "${builder}:/opt/fleet-vllm-olah/serve.py"
    podman exec "${builder}" sh -ec '
        if ! command -v git >/dev/null; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get -qq update
            apt-get -qq install -y --no-install-recommends git >/dev/null
            apt-get -qq clean
            rm -rf /var/lib/apt/lists/*
        fi
        python3 -m venv /opt/olah
        /opt/olah/bin/pip install --quiet --disable-pip-version-check --no-index \
            --find-links /opt/fleet-vllm-olah/wheels \
            --requirement /opt/fleet-vllm-olah/wheels/requirements.txt
        rm -rf /opt/fleet-vllm-olah/wheels /root/.cache/pip
        /opt/olah/bin/python -c "import olah.server"
    ' >&2
    printf '%s\n' "${olah_unit}" | podman exec -i "${builder}" sh -c 'cat >/etc/systemd/system/fleet-vllm-olah.service'
    printf '%s\n' "${wheels_unit}" | podman exec -i "${builder}" sh -c 'cat >/etc/systemd/system/fleet-vllm-wheels.service'
    printf '%s\n' "${config}" | podman exec -i "${builder}" sh -c 'cat >/etc/olah/configs.toml'
    podman exec "${builder}" systemctl enable fleet-vllm-olah.service fleet-vllm-wheels.service >/dev/null 2>&1
    podman stop --time 0 "${builder}" >/dev/null
    podman commit --quiet \
        --change 'CMD ["/sbin/init"]' \
        --change 'STOPSIGNAL SIGRTMIN+3' \
        --change "LABEL org.fleet-vllm.mirror-image=${key}" \
        --change "LABEL org.fleet-vllm.mirror-name=${name}" \
        "${builder}" "${image}" >/dev/null
    podman rm --force --time 0 "${builder}" >/dev/null
    trap - EXIT
    log "built ${image} in $((SECONDS - start)) s"
    # Older images of this mirror go (podman keeps one a container still runs).
    local old
    for old in $(podman images --filter "label=org.fleet-vllm.mirror-name=${name}" --format '{{.Repository}}:{{.Tag}}'); do
        [[ ${old} == "${image}" ]] || podman rmi "${old}" >/dev/null 2>&1 || true
    done
    printf '%s\n' "${image}"
}

sync_wheelhouse() {
    [[ -n ${wheel_src} ]] || return 0
    [[ -d ${wheel_src} ]] || die "FLEET_VLLM_MIRROR_WHEELHOUSE=${wheel_src} is not a directory"
    local want have
    want=$(cd "${wheel_src}" && find . -type f -printf '%P %s %T@\n' | LC_ALL=C sort | sha256sum | cut -c1-16)
    have=$(podman exec "${name}" cat /var/lib/olah/wheelhouse.key 2>/dev/null || true)
    if [[ ${want} == "${have}" ]]; then
        return 0
    fi
    # Copy over what is there, then remove what the source lacks: a file both have is never
    # missing, even for a moment. Several checkouts share this mirror (each Molecule create, the
    # demo, tests/ee) and sync their own wheelhouse; the former delete-then-copy made a host
    # that installed huggingface_hub right then find no wheel at all (seen).
    podman cp "${wheel_src}/." "${name}:/srv/wheelhouse/"
    (cd "${wheel_src}" && find . -type f -printf '%P\n') | podman exec -i "${name}" python3 -c '
import os, sys
keep = set(sys.stdin.read().splitlines())
for top, _, files in os.walk("/srv/wheelhouse"):
    for f in files:
        path = os.path.join(top, f)
        if os.path.relpath(path, "/srv/wheelhouse") not in keep:
            os.remove(path)'
    podman exec "${name}" sh -c "chmod -R a+rX /srv/wheelhouse && echo ${want} >/var/lib/olah/wheelhouse.key"
    log "wheel server: $(podman exec "${name}" find /srv/wheelhouse -type f | wc -l) files from ${wheel_src}"
}

wait_ready() {
    # Both units' ports accept connections (a TCP connect: the request log stays empty). Waiting
    # for `systemctl is-system-running` as well would add ~2 s for nothing the mirror needs.
    podman exec -i "${name}" python3 - "${olah_port}" "${wheels_port}" <<'EOF' >&2
import socket, subprocess, sys, time
deadline = time.monotonic() + 90
for port in sys.argv[1:]:
    while True:
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                subprocess.run(["systemctl", "--failed", "--no-pager"])
                subprocess.run(["journalctl", "-u", "fleet-vllm-olah", "-u", "fleet-vllm-wheels", "--no-pager", "-n", "40"])
                sys.exit("port %s is not answering" % port)
            time.sleep(0.1)
EOF
}

cmd_up() {
    [[ ${EUID} -eq 0 ]] || die "run as root (rootful podman)"
    local start=${SECONDS} base wheelhouse image content_key key tmp

    base=$("${here}/build-image.sh")
    wheelhouse=$("${hub}/olah/setup.sh" --wheelhouse)
    image=$(build_mirror_image "${base}" "${wheelhouse}")
    content_key=$({
        printf '%s %s\n' "${shards}" "${shard_bytes}"
        cat "${hub}/synthetic_repo.py" "${hub}/tiny_mla.py" "${root}"/tests/fixtures/models/kimi-k2.5-nvfp4/*
    } | sha256sum | cut -c1-12)
    key=${image##*:}-${content_key}

    if ! podman network exists "${network}"; then
        podman network create "${network}" >/dev/null 2>&1 || podman network exists "${network}" ||
            die "cannot create network ${network}"
        log "created network ${network}"
    fi

    local running have
    running=$(podman container inspect --format '{{.State.Running}}' "${name}" 2>/dev/null || true)
    have=$(podman container inspect --format '{{index .Config.Labels "org.fleet-vllm.mirror-key"}}' "${name}" 2>/dev/null || true)
    # Podman can still say "running" for a container whose processes are gone (killed from
    # outside): reuse it only when it answers.
    if [[ ${running} == true && ${have} == "${key}" ]] && podman exec "${name}" true >/dev/null 2>&1; then
        log "reusing running ${name}"
    else
        if [[ -n ${running} ]]; then
            log "replacing ${name} (running=${running}, key ${have:-none} -> ${key})"
            podman rm --force --time 0 "${name}" >/dev/null
        fi
        podman run --detach --name "${name}" --hostname "${name}" --network "${network}" \
            --systemd=always \
            --publish "127.0.0.1::${olah_port}" --publish "127.0.0.1::${wheels_port}" \
            --label "org.fleet-vllm.mirror-key=${key}" --label "org.fleet-vllm.role=site-mirror" \
            "${image}" >/dev/null
        tmp=$(mktemp -d)
        # shellcheck disable=SC2064
        trap "rm -rf '${tmp}'" EXIT
        "${python}" "${hub}/synthetic_repo.py" "${tmp}/files" --shards "${shards}" --shard-bytes "${shard_bytes}" \
            --mirrors "${tmp}/mirrors" >"${tmp}/summary.json"
        "${python}" "${hub}/tiny_mla.py" --mirrors "${tmp}/mirrors" >"${tmp}/tiny.json"
        podman cp "${tmp}/mirrors/." "${name}:/srv/mirrors/"
        log "mirrors: nvidia/Kimi-K2.5-NVFP4 main = $("${python}" -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha"])' "${tmp}/summary.json")"
        log "mirrors: $("${python}" -c 'import json,sys; print(", ".join("%s main = %s" % (s["repo_id"], s["sha"]) for s in json.load(open(sys.argv[1]))["mirrors"].values()))' "${tmp}/tiny.json")"
        rm -rf "${tmp}"
        trap - EXIT
    fi
    sync_wheelhouse
    wait_ready
    log "up in $((SECONDS - start)) s: olah $(published "${olah_port}"), wheels $(published "${wheels_port}")/"
    published "${olah_port}"
}

cmd_down() {
    if podman container exists "${name}"; then
        podman rm --force --time 0 "${name}" >/dev/null
        log "removed ${name}"
    fi
    if podman network exists "${network}"; then
        if [[ -z $(podman ps --all --quiet --filter "network=${network}") ]]; then
            podman network rm "${network}" >/dev/null
            log "removed network ${network}"
        else
            log "network ${network} kept: other containers use it"
        fi
    fi
}

# One up/down at a time per container name. The lock is held by a `flock -o` parent, never by
# this shell: podman hands the fds it inherits on to conmon and aardvark-dns, which outlive this
# script, so a lock fd open here would stay locked for as long as the container runs (seen: every
# later `up` hung).
if [[ ${1:-} == up || ${1:-} == down ]] && [[ ${FLEET_VLLM_MIRROR_LOCKED:-} != "${state_dir}" ]]; then
    mkdir -p "${state_dir}"
    FLEET_VLLM_MIRROR_LOCKED=${state_dir} exec flock -o "${state_dir}/${name}.lock" "${BASH_SOURCE[0]}" "$@"
fi

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
url)
    case ${2:-olah} in
    olah) published "${olah_port}" ;;
    wheels) printf '%s/\n' "$(published "${wheels_port}")" ;;
    *) usage ;;
    esac
    ;;
internal-url)
    case ${2:-olah} in
    olah) printf 'http://%s:%s\n' "${name}" "${olah_port}" ;;
    wheels) printf 'http://%s:%s/\n' "${name}" "${wheels_port}" ;;
    *) usage ;;
    esac
    ;;
log) podman exec "${name}" cat /var/log/olah/requests.log ;;
*) usage ;;
esac
