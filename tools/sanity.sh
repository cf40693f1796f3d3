#!/usr/bin/env bash
# Run `ansible-test sanity` on this checkout without Docker.
#
# ansible-test needs the collection at .../ansible_collections/fleet/vllm, so the files git
# knows (tracked, plus untracked ones that are not ignored) are copied to such a tree under
# .cache/ and tested there. The sanity tools run from a venv of their own (.cache/sanity-venv)
# with the versions this ansible-core pins (ansible-test --requirements installs them; its
# --venv mode would download a pip bootstrap from a host this network does not reach).
# Extra arguments go to ansible-test (e.g. --test validate-modules).
# FLEET_VLLM_ANSIBLE_CORE=2.16.19 runs another ansible-core's sanity tests (in a venv of its own,
# with FLEET_VLLM_PYTHON, a Python that core supports); `make test-compat` does that.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n ${FLEET_VLLM_ANSIBLE_CORE:-} ]]; then
  core=ansible-core==${FLEET_VLLM_ANSIBLE_CORE}
  venv=$root/.cache/sanity-venv-${FLEET_VLLM_ANSIBLE_CORE}
else
  core=$(grep -E '^ansible-core==' "$root/requirements-dev.txt")
  venv=$root/.cache/sanity-venv
fi
if [[ ! -f $venv/.complete-$core ]]; then
  rm -rf "$venv"
  "${FLEET_VLLM_PYTHON:-python3.11}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$core"
  touch "$venv/.complete-$core"
fi
pip_version=$(grep -ohP "^\s+pip='\K[0-9.]+" \
  "$venv"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | head -n1)
if [[ -n $pip_version ]]; then
  mkdir -p ~/.ansible/test/cache
  cp "$root/tools/ansible-test-get-pip.py" ~/.ansible/test/cache/"get_pip_${pip_version//./_}.py"
fi
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
mkdir -p "$root/.cache"
tree=$(mktemp -d "$root/.cache/sanity.XXXXXX")   # one tree per run: runs may overlap
trap 'rm -rf "$tree"' EXIT
work=$tree/ansible_collections/fleet/vllm
mkdir -p "$work"
cd "$root"
git ls-files -z --cached --others --exclude-standard \
  | grep -zv '^collections/' \
  | xargs -0 -I{} cp --parents -P {} "$work/" 2>/dev/null || true
# Files deleted in the work tree but still in the index are simply absent in the copy.
cd "$work"
git init -q . && git add -A >/dev/null 2>&1 && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity >/dev/null
PATH=$venv/bin:$PATH "$venv/bin/ansible-test" sanity --local --requirements --python "$python_version" --color no "$@"
