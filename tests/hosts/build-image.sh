#!/usr/bin/env bash
# Build the fleet.vllm test-host image locally (there is no container registry: never pull).
#
# A Debian bookworm root filesystem with systemd as init, Python and the packages listed in
# tests/hosts/image-packages.txt, made by mmdebstrap from Debian's packages, with this machine's
# extra CA certificates (/usr/local/share/ca-certificates) installed so HTTPS works inside the
# hosts. Imported with `podman import` as localhost/fleet-vllm-testhost:<hash>, where <hash>
# covers every build input (this script, the package list, the extra CAs, the mirror).
#
# The tarball is cached under ${FLEET_VLLM_CACHE:-~/.cache/fleet-vllm}/images/; an existing image
# with the same tag means nothing to do, a cached tarball means only the import (1-4 s).
#
# Prints the image name on stdout (progress goes to stderr), so callers can do
#   image=$(tests/hosts/build-image.sh)
# Run as root (rootful Podman; mmdebstrap in root mode), after tests/hosts/prepare-machine.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
packages_file=${here}/image-packages.txt
suite=bookworm
mirror=${FLEET_VLLM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FLEET_VLLM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
extra_ca_dir=/usr/local/share/ca-certificates
cache_dir=${FLEET_VLLM_CACHE:-${HOME}/.cache/fleet-vllm}/images
repo=localhost/fleet-vllm-testhost

log() { printf 'build-image: %s\n' "$*" >&2; }

mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "${packages_file}" | grep -v '^$')

# The extra CAs are build inputs too: a machine with another CA gets another image.
mapfile -t extra_cas < <(find "${extra_ca_dir}" -type f -name '*.crt' 2>/dev/null | LC_ALL=C sort)

hash=$(
    {
        cat "${BASH_SOURCE[0]}" "${packages_file}"
        printf '%s\n' "${suite}" "${mirror}" "${security_mirror}"
        for ca in "${extra_cas[@]}"; do
            printf '%s\n' "${ca##*/}"
            cat "${ca}"
        done
    } | sha256sum | cut -c1-12
)
image=${repo}:${hash}
tarball=${cache_dir}/fleet-vllm-testhost-${hash}.tar.zst

if podman image exists "${image}"; then
    log "image ${image} exists"
    printf '%s\n' "${image}"
    exit 0
fi

mkdir -p "${cache_dir}"
# One build at a time per cache (two engineers or a CI run may share the machine).
exec 9>"${cache_dir}/.lock"
flock 9

if [[ -s ${tarball} ]]; then
    log "using cached ${tarball}"
else
    log "building ${tarball} with mmdebstrap (${#packages[@]} packages, ~35 s)"
    start=${SECONDS}
    tmp=$(mktemp --suffix=.tar.zst "${cache_dir}/.build-XXXXXX")
    trap 'rm -f "${tmp}"' EXIT
    ca_hooks=()
    if ((${#extra_cas[@]})); then
        ca_hooks+=(--customize-hook="mkdir -p \"\$1${extra_ca_dir}\"")
        for ca in "${extra_cas[@]}"; do
            ca_hooks+=(--customize-hook="copy-in ${ca} ${extra_ca_dir}")
        done
    fi
    # --variant=apt: Essential packages + apt; Recommends are not installed.
    # dpkg path excludes drop documentation and translations nobody reads in a test host.
    # Customize hooks, in order:
    #   - the extra CAs + update-ca-certificates (pip and the Hub client verify TLS),
    #   - an empty /etc/machine-id so each container's systemd makes its own,
    #   - no unit needs masking: the image boots to `running` under Podman as it is,
    #   - multi-user.target as default,
    #   - the monitoring packages' services disabled (vllm_monitoring starts them where it is asked to).
    # The hooks' "$1" (the new root) is expanded by mmdebstrap's hook shell, not here.
    # shellcheck disable=SC2016
    mmdebstrap \
        --quiet \
        --variant=apt \
        --format=tar \
        --include="$(IFS=,; echo "${packages[*]}")" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        "${ca_hooks[@]}" \
        --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null' \
        --customize-hook='truncate -s 0 "$1/etc/machine-id"; rm -f "$1/var/lib/dbus/machine-id"' \
        --customize-hook='chroot "$1" systemctl set-default multi-user.target' \
        --customize-hook='chroot "$1" systemctl disable prometheus.service prometheus-alertmanager.service prometheus-node-exporter.service' \
        "${suite}" "${tmp}" \
        "deb ${mirror} ${suite} main" \
        "deb ${mirror} ${suite}-updates main" \
        "deb ${security_mirror} ${suite}-security main" >&2
    chmod 0644 "${tmp}"
    mv -f "${tmp}" "${tarball}"
    trap - EXIT
    log "built in $((SECONDS - start)) s: $(du -h "${tarball}" | cut -f1)"
fi

start=${SECONDS}
# CMD /sbin/init: Podman sees systemd and runs it as PID 1 (tmpfs on /run and /tmp, cgroup
# mounts, container=podman, SIGRTMIN+3 to stop).
podman import \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL org.fleet-vllm.inputs-hash=${hash}" \
    --message "fleet.vllm test host (Debian ${suite}, systemd)" \
    "${tarball}" "${image}" >/dev/null
log "imported ${image} in $((SECONDS - start)) s"
printf '%s\n' "${image}"
