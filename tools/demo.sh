#!/usr/bin/env bash
# The local demo: run the collection's main job with ansible-playbook from this checkout and
# show what it did. Today that is the KV-cache fix on a Kimi-K2.5-NVFP4-shaped model directory
# (the checkpoint's config files, without the 540 GB of weights): the FP8 KV-cache declaration
# is stripped so vLLM falls back to a bf16 KV cache, then a second run shows nothing changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
demo=$root/.cache/demo/nvidia--Kimi-K2.5-NVFP4
rm -rf "$demo"
mkdir -p "$(dirname "$demo")"
cp -r tests/fixtures/models/kimi-k2.5-nvfp4 "$demo"
export PATH=$root/.venv/bin:$PATH ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false
run() {
  ansible-playbook tests/integration/playbooks/kv_cache_config.yml \
    -e "model_path=$demo" -e "kv_state=$1" "${@:2}"
}
echo "== 1. strip the FP8 KV-cache declaration (with --diff)"
run absent --diff
echo "== 2. run again: nothing to do"
run absent
echo "== demo model directory: $demo"
echo "   record of what was removed: $demo/.fleet-vllm-kv-cache.json"
echo "   undo with: .venv/bin/ansible-playbook tests/integration/playbooks/kv_cache_config.yml -e model_path=$demo -e kv_state=present"
