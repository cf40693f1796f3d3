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
#     machine's), for the small venv the weights role downloads with.
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
        printf '%s\n' "${sim_versions[@]}" "${hf_hub_version}" "${py_version}" "$(uname -m)"
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

start=${SECONDS}
tmp=$(mktemp -d "${dir}/.build-XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
for version in "${sim_versions[@]}"; do
    "${python}" "${root}/tests/simulator/build-wheel.py" "${version}" "${tmp}" >&2
done
# Wheels only (the hosts have no compilers), for the hosts' interpreter and platform.
"${python}" -m pip download --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: --python-version "${py_version}" --implementation cp \
    --dest "${tmp}" "huggingface_hub==${hf_hub_version}" >&2

# Replace the contents in place: the directory may be bind-mounted by the mirror container.
rm -f "${stamp}"
find "${dir}" -maxdepth 1 -type f -name '*.whl' -delete
mv "${tmp}"/*.whl "${dir}/"
printf '%s\n' "${hash}" >"${stamp}"
log "built ${dir} in $((SECONDS - start)) s: $(find "${dir}" -maxdepth 1 -name '*.whl' | wc -l) wheels, $(du -sh "${dir}" | cut -f1)"
printf '%s\n' "${dir}"
