#!/usr/bin/env bash
# Build the base image of the test execution environment locally (there is no container
# registry here, so the usual base images - ansible-automation-platform/ee-minimal,
# fedora-minimal - cannot be pulled).
#
# A Debian bookworm root filesystem made by mmdebstrap from Debian's packages, with what
# ansible-builder 3 expects of a base image: python3 with pip and venv (the builder stage makes a
# venv, installs bindep and pip-installs the collections' Python requirements), ca-certificates
# (this machine's extra CAs too, so pip reaches PyPI through the re-signing proxy) and a package
# manager. ansible-builder's scripts (assemble, install-from-bindep) call the package manager as
# dnf is called (`install -y PKG...`, `clean all`); /usr/local/bin/fleet-vllm-pkgmgr turns those
# calls into apt-get's, and the EE definition names it as options.package_manager_path.
# Debian marks its Python "externally managed" (PEP 668): the marker is removed, because in an
# EE image pip owns the system Python's site-packages, as in the images ansible-builder targets.
#
# Imported with `podman import` as localhost/fleet-vllm-ee-base:<hash of the inputs>; the tarball
# is cached under ${FLEET_VLLM_CACHE:-~/.cache/fleet-vllm}/images/. Prints the image name on
# stdout (progress on stderr). Run as root, after tests/hosts/prepare-machine.sh.
set -euo pipefail


suite=bookworm
mirror=${FLEET_VLLM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FLEET_VLLM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
extra_ca_dir=/usr/local/share/ca-certificates
cache_dir=${FLEET_VLLM_CACHE:-${HOME}/.cache/fleet-vllm}/images
repo=localhost/fleet-vllm-ee-base
# What an EE needs besides Python: ssh for real fleets, git for projects and galaxy, rsync, and
# what the ansible-builder stages run (bash, findutils: Essential).
packages=(python3 python3-pip python3-venv python3-wheel ca-certificates openssh-client git rsync
          sudo procps)

log() { printf 'build-ee-base: %s\n' "$*" >&2; }

# shellcheck disable=SC2016 # $1, $@ belong to the script written into the image
pkgmgr='#!/bin/sh
# dnf-style front end to apt-get for the scripts of ansible-builder (fleet.vllm test EE base).
set -e
cmd=$1; shift
case "$cmd" in
  install)
    [ "$1" = "-y" ] && shift
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive exec apt-get install -y -qq --no-install-recommends "$@" ;;
  clean) exec apt-get clean ;;
  *) echo "fleet-vllm-pkgmgr: unsupported: $cmd $*" >&2; exit 2 ;;
esac'

mapfile -t extra_cas < <(find "${extra_ca_dir}" -type f -name '*.crt' 2>/dev/null | LC_ALL=C sort)
hash=$(
    {
        cat "${BASH_SOURCE[0]}"
        printf '%s\n' "${suite}" "${mirror}" "${security_mirror}"
        for ca in "${extra_cas[@]}"; do
            printf '%s\n' "${ca##*/}"
            cat "${ca}"
        done
    } | sha256sum | cut -c1-12
)
image=${repo}:${hash}
tarball=${cache_dir}/fleet-vllm-ee-base-${hash}.tar.zst

if podman image exists "${image}"; then
    log "image ${image} exists"
    printf '%s\n' "${image}"
    exit 0
fi

mkdir -p "${cache_dir}"
exec 9>"${cache_dir}/.lock-ee-base"
flock 9

if [[ -s ${tarball} ]]; then
    log "using cached ${tarball}"
else
    log "building ${tarball} with mmdebstrap (${#packages[@]} packages, about a minute)"
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
    pkgmgr_file=$(mktemp)
    printf '%s\n' "${pkgmgr}" >"${pkgmgr_file}"
    chmod 0755 "${pkgmgr_file}"
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
        "${ca_hooks[@]}" \
        --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null' \
        --customize-hook="upload ${pkgmgr_file} /usr/local/bin/fleet-vllm-pkgmgr" \
        --customize-hook='chmod 0755 "$1/usr/local/bin/fleet-vllm-pkgmgr"' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/*' \
        "${suite}" "${tmp}" \
        "deb ${mirror} ${suite} main" \
        "deb ${mirror} ${suite}-updates main" \
        "deb ${security_mirror} ${suite}-security main" >&2
    rm -f "${pkgmgr_file}"
    chmod 0644 "${tmp}"
    mv -f "${tmp}" "${tarball}"
    trap - EXIT
    log "built in $((SECONDS - start)) s: $(du -h "${tarball}" | cut -f1)"
fi

podman import \
    --change 'CMD ["/bin/bash"]' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL org.fleet-vllm.inputs-hash=${hash}" \
    --message "fleet.vllm execution-environment base (Debian ${suite}, built here)" \
    "${tarball}" "${image}" >/dev/null
log "imported ${image}"
printf '%s\n' "${image}"
