#!/usr/bin/env bash
# Set up (or refresh) everything a checkout needs to run the demo and the tests:
#   - the few Debian packages the tests use (as root, when missing),
#   - .venv: Python >= 3.11 with the pinned tooling of requirements-dev.txt.
# Re-running it is cheap: the venv is rebuilt only when requirements-dev.txt changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# prometheus, prometheus-alertmanager, prometheus-node-exporter: promtool and amtool check the monitoring's rules
# and configurations, and the tests compare the exporters' series with what the rules and dashboard read.
apt_packages=(git rsync shellcheck haproxy strace prometheus prometheus-alertmanager prometheus-node-exporter)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing ${missing[*]}" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: please install: ${missing[*]} (Debian package names)" >&2
    exit 1
  fi
fi

# Look for Python outside our own venv, which may be about to be rebuilt.
PATH=$(tr ':' '\n' <<<"$PATH" | grep -vxF "$root/.venv/bin" | paste -sd: -)
python=${FLEET_VLLM_PYTHON:-}
if [[ -z $python ]]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      python=$cand; break
    fi
  done
fi
if [[ -z $python ]]; then
  echo "bootstrap: the controller needs Python >= 3.11 (ansible-core 2.19); set FLEET_VLLM_PYTHON" >&2
  exit 1
fi

stamp=.venv/.requirements-$(sha256sum requirements-dev.txt | cut -c1-16)
if [[ ! -f $stamp ]]; then
  echo "bootstrap: creating .venv with $($python --version) and requirements-dev.txt" >&2
  rm -rf .venv
  "$python" -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
  touch "$stamp"
fi
echo "bootstrap: ready ($(.venv/bin/ansible --version | sed -n 1p))" >&2
