"""Issue 24 point 15: vLLM fetches a request's image_url, video_url or audio_url from the GPU host. Its only guard,
--allowed-media-domains, lets every host through when the list is empty (vLLM 0.16.0 and 0.33.0,
vllm/multimodal/media/connector.py _assert_url_in_allowed_media_domains: "if self.allowed_media_domains and ...").
So vllm_server never passes an empty list: with no domain listed it passes a name no URL can carry. The real vLLM's
MediaConnector is the oracle, in both builds."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from conftest import ROOT

VARS = yaml.safe_load((ROOT / "roles" / "vllm_server" / "vars" / "main.yml").read_text())
NO_MEDIA = VARS["_vllm_server_no_media_domain"]

# The addresses a media URL must not reach from the GPU host: the cloud's metadata service, the engine itself and
# anything else on loopback, the LAN; the sentinel itself, as a URL can spell it.
URLS = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/", "http://[fd00:ec2::254]/latest/",
    "http://metadata.google.internal/computeMetadata/v1/", "http://127.0.0.1:8000/v1/models", "http://localhost:9000/",
    "https://10.0.0.5/x.png", "http://no%20media%20URLs/x.png", "http://NO%20MEDIA%20URLS/x.png",
    "http://no media URLs/x.png", "HTTP://169.254.169.254/",
]

CODE = r'''
import json, sys
import vllm.platforms
try:
    if not vllm.platforms.current_platform.device_type:
        raise RuntimeError
except Exception:
    import vllm.platforms.cpu
    vllm.platforms._current_platform = vllm.platforms.cpu.CpuPlatform()
from urllib3.util import parse_url
from vllm.multimodal.media.connector import MediaConnector
domains, urls = json.loads(sys.argv[1])
out = {}
for name, allowed in domains.items():
    connector = MediaConnector(allowed_media_domains=allowed)
    out[name] = []
    for url in urls:
        try:
            connector._assert_url_in_allowed_media_domains(parse_url(url))
            out[name].append("allowed")
        except Exception as exc:
            out[name].append("refused " + type(exc).__name__)
print(json.dumps(out))
'''


def _ask(venv, env, domains):
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", CODE, json.dumps([domains, URLS])],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(answer):
    # An empty list, vLLM's default, allows every URL a parser takes: the reason the role never passes one.
    assert answer["empty"][0] == "allowed" and answer["empty"][3] == "allowed", answer
    # The role's default refuses every one, before any lookup or connection.
    assert all(outcome.startswith("refused") for outcome in answer["role"]), answer
    # A listed host is allowed, and only it.
    assert answer["listed"] == ["refused ValueError"] * 5 + ["allowed"] + ["refused ValueError"] * 2 + [
        "refused LocationParseError", "refused ValueError"], answer


@pytest.mark.vllm
def test_no_media_domain_refuses_every_media_url(vllm_venv, vllm_env):
    _check(_ask(vllm_venv, vllm_env, {"empty": [], "role": [NO_MEDIA], "listed": ["10.0.0.5"]}))


@pytest.mark.vllm
def test_no_media_domain_refuses_every_media_url_in_0_16(vllm_venv_old, vllm_env):
    _check(_ask(vllm_venv_old, vllm_env, {"empty": [], "role": [NO_MEDIA], "listed": ["10.0.0.5"]}))
