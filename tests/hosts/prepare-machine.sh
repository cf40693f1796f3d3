#!/usr/bin/env bash
# Prepare this machine to run fleet.vllm's test hosts: rootful Podman containers with systemd
# as PID 1, from an image built locally with mmdebstrap (there is no container registry).
#
# Idempotent; run as root. Safe to rerun: installs only missing packages and rewrites its own
# containers.conf drop-in only when the content differs. Prints what it did.
#
# What it fixes (docs/evidence.md section 6 has the measurements):
#   - crun refuses hybrid cgroups v1 ("cgroups in hybrid mode not supported"): use runc.
#   - Podman's default container ulimits exceed what this VM allows (root lacks
#     CAP_SYS_RESOURCE: "setrlimit RLIMIT_NOFILE: Operation not permitted"): set
#     default_ulimits from this machine's hard limits.
set -euo pipefail

if [[ ${EUID} -ne 0 ]]; then
    echo "prepare-machine: must run as root" >&2
    exit 1
fi

say() { printf 'prepare-machine: %s\n' "$*"; }

# Packages. Recommends are off on purpose: podman recommends buildah, fuse-overlayfs,
# slirp4netns, uidmap... which rootful Podman on a kernel with overlayfs does not need.
# netavark + aardvark-dns give a podman network where containers resolve each other by name;
# netavark drives iptables.
packages=(
    podman
    runc
    conmon
    golang-github-containers-common
    netavark
    aardvark-dns
    iptables
    mmdebstrap
    zstd
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    say "packages already installed: ${packages[*]}"
fi

# containers.conf: a drop-in of our own, so unrelated settings in /etc/containers/containers.conf
# (or other drop-ins) are left alone. Podman 4.3 (containers/common 0.50) reads
# /etc/containers/containers.conf.d/*.conf after containers.conf.
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
if [[ ${hard_nproc} == unlimited ]] || ((hard_nproc > pid_max)); then
    nproc_limit=${pid_max}
else
    nproc_limit=${hard_nproc}
fi
if [[ ${hard_nofile} == unlimited ]]; then
    # An unlimited hard limit still caps at fs.nr_open.
    hard_nofile=$(cat /proc/sys/fs/nr_open)
fi

dropin_dir=/etc/containers/containers.conf.d
dropin=${dropin_dir}/50-fleet-vllm-testhosts.conf
desired=$(cat <<EOF
# Written by fleet.vllm tests/hosts/prepare-machine.sh; rerun it rather than editing this file.
[containers]
# Podman's defaults exceed this machine's hard limits (root lacks CAP_SYS_RESOURCE).
default_ulimits = [
  "nofile=${hard_nofile}:${hard_nofile}",
  "nproc=${nproc_limit}:${nproc_limit}",
]

[engine]
# crun refuses hybrid cgroups v1; runc works.
runtime = "runc"
EOF
)
mkdir -p "${dropin_dir}"
if [[ -f ${dropin} ]] && [[ "$(cat "${dropin}")" == "${desired}" ]]; then
    say "${dropin} already up to date"
else
    tmp=$(mktemp "${dropin_dir}/.fleet-vllm.XXXXXX")
    printf '%s\n' "${desired}" >"${tmp}"
    chmod 0644 "${tmp}"
    mv -f "${tmp}" "${dropin}"
    say "wrote ${dropin} (runtime=runc, nofile=${hard_nofile}, nproc=${nproc_limit})"
fi

# Check what podman actually uses, so a setting shadowed elsewhere shows up here.
runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || true)
if [[ ${runtime} != runc ]]; then
    echo "prepare-machine: podman reports OCI runtime '${runtime}', expected runc" >&2
    exit 1
fi
say "podman $(podman version --format '{{.Client.Version}}' 2>/dev/null), runtime ${runtime}, cgroups $(podman info --format '{{.Host.CgroupsVersion}}' 2>/dev/null)"
