# shellcheck shell=bash
# Where a client reaches the test hosts, asked of the roles (one source): sourced by
# tests/ee/test-ee.sh and tools/demo.sh, and checked in CI by tests/integration/test_harness_endpoints.py.
#
#   endpoints_ask INVENTORY DIR       # tests/helpers/endpoints.yml: DIR/<host>.json (0600, key inside)
#   endpoint_field DIR HOST FIELD     # scheme, port, model, api_key, kind; paths one per line
#   endpoint_probe URL KEY MODEL      # what a client of a front door or gateway gets, or a message and rc 1

endpoints_ask() {
    local inventory=$1 dir=$2 root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    rm -rf "${dir}"
    mkdir -p "$(dirname "${dir}")"
    mkdir -m 0700 "${dir}"
    (cd "${root}" && ansible-playbook tests/helpers/endpoints.yml -i "${inventory}" \
        -e "fleet_vllm_endpoint_dir=${dir}" >"${dir}.log" 2>&1) \
        || { tail -n 20 "${dir}.log" >&2; echo "endpoint.sh: tests/helpers/endpoints.yml failed (${dir}.log)" >&2; return 1; }
}

endpoint_field() {
    python3 - "$1/$2.json" "$3" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))[sys.argv[2]]
print("\n".join(value) if isinstance(value, list) else value)
PY
}

# The front door (or gateway) as a client meets it: a request without the key is refused (401),
# /health with it answers 200, /v1/models lists MODEL, a chat completion returns tokens.
endpoint_probe() {
    local url=$1 key=$2 model=$3 code answer
    code=$(curl -s -o /dev/null -w '%{http_code}' "${url}/health") || true
    [[ ${code} == 401 ]] || { echo "${url}/health without the key answered ${code}, not 401"; return 1; }
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${key}" "${url}/health") || true
    [[ ${code} == 200 ]] || { echo "${url}/health with the key answered ${code}, not 200"; return 1; }
    answer=$(curl -s -H "Authorization: Bearer ${key}" "${url}/v1/models") || true
    python3 -c 'import json, sys; sys.exit(sys.argv[2] not in [m["id"] for m in json.loads(sys.argv[1])["data"]])' \
        "${answer}" "${model}" 2>/dev/null || { echo "${url}/v1/models does not list ${model}: ${answer}"; return 1; }
    answer=$(curl -s -H "Authorization: Bearer ${key}" -H 'Content-Type: application/json' \
        -d "{\"model\": \"${model}\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4}" \
        "${url}/v1/chat/completions") || true
    python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1])["usage"]["completion_tokens"] < 1)' "${answer}" 2>/dev/null \
        || { echo "${url}/v1/chat/completions gave no tokens: ${answer}"; return 1; }
}
