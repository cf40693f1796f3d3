#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_diagnose
short_description: Name the known failure of a vLLM service, with its evidence and its fix
version_added: "0.1.0"
description:
  - Reads what a vLLM service leaves on its host and matches it against the failures this
    collection knows, each with the journal lines that prove it, its cause, and its fix (the
    variable to set and the playbook and tags to run).
  - Reads the service's state with C(systemctl show) and its journal with
    C(journalctl -u UNIT -n LINES -o cat), unless O(journal_text) gives a saved journal to
    analyse instead (then neither is called).
  - Lists leftover shared-memory files of vLLM in O(shm_dir) (C(psm_*), C(sem.mp-*),
    C(vllm_offload_*)) with their owner; they are a failure only while the service is stopped,
    or when the journal shows a start that tripped over them.
  - With O(model_path), checks that every shard the safetensors index names is there, not
    empty, and exactly as long as its header says (the 8-byte header length, the header and the
    end of the last tensor's data; only the headers are read).
  - With O(base_url) (or O(unix_socket)), asks C(GET /health) and then a two-token C(POST /v1/chat/completions)
    (the collection's one probe - C(max_tokens) and vLLM's C(min_tokens) 2 and C(ignore_eos), so that
    a decode step runs even when the model's first token is its end-of-sequence token; an answer
    of fewer tokens is an error); a health check that answers while the completion times out is
    the hang of vLLM issue 39863.
  - Known failures, by id - V(attention_backend) no attention backend for the KV-cache dtype on
    this GPU (the FP8 KV cache of Kimi-K2.5-NVFP4 on compute capability 12.0 before vLLM commit
    a1257fd1ea93); V(rejected_flag) vLLM's argument parser refused a flag; V(gpu_out_of_memory)
    CUDA out of memory, no memory for the KV cache, or a context length that does not fit;
    V(nccl) NCCL errors, collective timeouts and hangs in NCCL set-up; V(port_in_use) the port
    is taken; V(shm_too_small) O(shm_dir) had no room for the engine's shared-memory segment (vLLM's
    sizes, and O(shm_dir)'s size and free space now); V(shm_leftovers) leftover files in /dev/shm;
    V(model_files) shards missing or
    truncated; V(engine_unhealthy) the engine is unhealthy behind a healthy C(/health) (a completion
    hangs or fails with a 5xx while C(/health) answers 200); V(engine_core_died)
    the engine core died, pointing at the first error above it when nothing more specific
    matched.
  - A finding must not contradict what the host shows. When the journal has a failure's words and
    what was measured says otherwise (no leftover file in O(shm_dir), every shard whole, room in
    O(shm_dir) now, an endpoint whose two-token completion answers), the finding says what the
    journal said and what the host shows instead (C(details.contradicted_by)), claims no cause,
    and does not make the service unhealthy.
  - An unknown failure gives no finding; RV(journal_tail) then holds the traceback of the first
    error of the latest failed start, or the last error lines.
  - Reads only; never changes the host.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  platform:
    description: Runs on the host of the vLLM service (systemd, for the service state and the journal).
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  unit:
    description:
      - The systemd unit of the vLLM service. A name without a suffix gets C(.service).
    type: str
    default: vllm.service
  journal_lines:
    description:
      - How many of the journal's last lines to read. A start of an 8-GPU server that fails prints
        a traceback per worker, so a few hundred lines hold the first error.
    type: int
    default: 400
  since_last_start:
    description:
      - Analyse only the lines after the last start of the unit (systemd's C(Started) line).
      - By default the lines since the last start that reached readiness are analysed (failures
        before it were fixed since), or all lines read when no start did; so a crash loop that is
        loading again still shows the error of the start before.
    type: bool
    default: false
  journal_text:
    description:
      - Journal text to analyse instead of reading C(journalctl) and C(systemctl), as
        C(journalctl -u vllm.service -o cat) prints it; for a journal saved from another host.
        The service's state is then taken from systemd's lines in the text.
    type: str
  shm_dir:
    description:
      - Where POSIX shared memory lives. Its leftover vLLM files, its size and its free space are
        read; when it does not exist (V(/nonexistent) for a journal saved elsewhere) nothing is
        claimed about it.
    type: path
    default: /dev/shm
  service_user:
    description:
      - The account the service runs as. Only leftover files it owns are for the service's
        clean-up to remove.
    type: str
    default: vllm
  model_path:
    description:
      - The model directory the service serves (links to the shards are followed). When set, the
        shards are checked.
    type: path
  base_url:
    description:
      - Where the OpenAI-compatible endpoint answers, for example V(http://127.0.0.1:8000). When
        set, the endpoint is probed. Proxies from the environment are not used.
      - With O(unix_socket), its host is only what the C(Host) header says; not set, it is V(http://localhost).
    type: str
  unix_socket:
    description:
      - The path of the Unix socket the endpoint listens on (vLLM's C(--uds PATH)). When set, the
        endpoint is probed over it (with O(base_url), or V(http://localhost) without), not at the
        host and port of O(base_url).
      - A socket that does not exist, or that refuses the connection, is reported as a refused
        connection - nothing listens (the model is still loading) or the service is down.
      - The evidence of a finding names the socket after the URL, for example
        C(GET http://localhost/health over unix:/run/fleet-vllm/vllm/engine.sock -> 503).
    type: path
  api_key:
    description:
      - The API key the server requires (C(--api-key), C(VLLM_API_KEY)), sent as a bearer token.
        Not set, no C(Authorization) header is sent.
    type: str
  served_model_name:
    description:
      - The model name to ask for in the completion. Without it the first model of
        C(GET /v1/models) is used.
    type: str
  timeout:
    description:
      - Seconds to wait for each HTTP answer. A two-token completion that takes longer counts as
        hung while C(/health) answers.
    type: int
    default: 30
notes:
  - Run it with C(become); the journal of a system unit is readable by root and the
    C(systemd-journal) group.
  - The analysis works on C(-o cat) text, without timestamps. A hang in NCCL set-up is recognised
    when a start ended (a systemd timeout, a kill after C(stop-sigterm) timed out, vLLM reporting
    workers that do not answer) before the model started to load.
seealso:
  - name: vLLM issue 39863
    description: The API server answers /health while the engine core is dead or hung.
    link: https://github.com/vllm-project/vllm/issues/39863
  - module: fleet.vllm.kv_cache_config
"""

EXAMPLES = r"""
- name: Diagnose the vLLM service of this host
  fleet.vllm.vllm_diagnose:
    unit: vllm.service
    base_url: http://127.0.0.1:8000
    api_key: "{{ vllm_server_api_key }}"
    model_path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
  register: diagnosis
  become: true

- name: Diagnose an engine that serves on a Unix socket (vllm serve --uds), which has no API key
  fleet.vllm.vllm_diagnose:
    unit: vllm.service
    unix_socket: /run/fleet-vllm/vllm/engine.sock
  register: diagnosis
  become: true

- name: Show what failed and how to fix it
  ansible.builtin.debug:
    msg: "{{ item.title }}: {{ item.remedy }}"
  loop: "{{ diagnosis.findings }}"
  loop_control:
    label: "{{ item.id }}"

- name: Analyse a journal saved from another host, on the controller
  fleet.vllm.vllm_diagnose:
    journal_text: "{{ lookup('ansible.builtin.file', 'gpu07-vllm.journal') }}"
    shm_dir: /nonexistent
  delegate_to: localhost
"""

RETURN = r"""
service:
  description:
    - The state of the unit from C(systemctl show), or what the journal text says when
      O(journal_text) is given (then C(checked) is false and the systemd fields are null).
    - C(stopped) is true for C(inactive), C(failed) and C(activating/auto-restart) (between two
      starts of a crash loop).
  returned: always
  type: dict
  sample:
    unit: vllm.service
    checked: true
    load_state: loaded
    active_state: activating
    sub_state: auto-restart
    result: exit-code
    exec_main_status: 1
    n_restarts: 4
    active_enter_timestamp: ""
    stopped: true
findings:
  description:
    - The known failures found, root causes first. Each has C(id), C(title), C(evidence) (the
      journal lines or observations that prove it, a few, trimmed), C(cause), C(remedy) and
      C(details) (what was extracted, for example the backend reasons of V(attention_backend)).
    - A finding whose journal words the host contradicts has C(details.contradicted_by) (what the
      host shows), C(details.journal_says) and C(details.cause_if_it_were_so); its title ends in
      "in the journal, not on the host now" and its cause says what the journal said.
  returned: always
  type: list
  elements: dict
  sample:
    - id: attention_backend
      title: No attention backend for this KV-cache dtype on this GPU
      evidence:
        - "(Worker_TP0 pid=41520) ERROR 11-29 10:02:44 [multiproc_executor.py:772] ValueError: No valid attention backend found ..."
      cause: "No attention backend of this vLLM build accepts kv_cache_dtype=fp8_e4m3 on this GPU (...)"
      remedy: "KV-cache fix: set `vllm_kv_cache_policy: strip` ..."
      details:
        kv_cache_dtype: fp8_e4m3
        backend_reasons: {TRITON_MLA: [kv_cache_dtype not supported]}
shm_leftovers:
  description:
    - Files in O(shm_dir) named like vLLM's shared memory, with C(path), C(owner), C(uid),
      C(size), C(owned_by_service_user), and C(removable) (owned by O(service_user) while the
      service is stopped).
  returned: always
  type: list
  elements: dict
  sample:
    - path: /dev/shm/psm_3f9a1c2e
      owner: vllm
      uid: 998
      size: 251658240
      owned_by_service_user: true
      removable: true
model_check:
  description:
    - The check of O(model_path) - C(checked), C(path), C(index) (the index file used, or null),
      C(shards) (how many are expected), C(missing), C(empty), C(truncated) (dicts with
      C(file), C(size), C(expected_size)), C(problems) (one line each) and C(ok).
  returned: always
  type: dict
  sample:
    checked: true
    path: /srv/models/served/nvidia--Kimi-K2.5-NVFP4
    index: model.safetensors.index.json
    shards: 119
    missing: []
    empty: []
    truncated:
      - {file: model-00042-of-000119.safetensors, size: 2147483648, expected_size: 4993724416}
    problems: ["model-00042-of-000119.safetensors is truncated: 2147483648 bytes, its header says 4993724416"]
    ok: false
endpoint:
  description:
    - The HTTP probe - C(checked), C(base_url), C(unix_socket) (the socket probed over, V(null) when none was),
      C(health_status), C(health_error),
      C(model), C(completion_status), C(completion_error), C(completion_seconds), C(timeout),
      C(hang) (health 200 and no completion within O(timeout)) and C(ok).
  returned: always
  type: dict
  sample:
    checked: true
    base_url: http://127.0.0.1:8000
    unix_socket: null
    health_status: 200
    health_error: null
    model: kimi-k2.5
    completion_status: null
    completion_error: no answer within 30 s
    completion_seconds: 30.0
    timeout: 30
    hang: true
    ok: false
journal_tail:
  description:
    - The journal lines to read when no finding explains a failure - the traceback of the first
      error of the latest failed start, or the last error lines, or the last lines.
  returned: always
  type: list
  elements: str
healthy:
  description:
    - True when no failure is found (a finding the host contradicts is none), the service is
      active (or the journal shows a start that did not end) and, when probed, the endpoint
      answered a two-token completion.
  returned: always
  type: bool
  sample: false
msg:
  description: The diagnosis in one line.
  returned: always
  type: str
  sample: "vllm.service failed (exit-code, 4 restarts): No attention backend for this KV-cache dtype on this GPU"
"""

import fnmatch
import json
import os
import pwd
import struct

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.fleet.vllm.plugins.module_utils._failures import SHM_PATTERNS, diagnose
from ansible_collections.fleet.vllm.plugins.module_utils._journal_text import journal_stopped
from ansible_collections.fleet.vllm.plugins.module_utils._readiness import PROBE_PATH, probe_request, probe_shortfall
from ansible_collections.fleet.vllm.plugins.module_utils._units import journal_argv, parse_properties, request, run_c, show_argv

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus", "NRestarts", "ActiveEnterTimestamp")
INDEX_FILE = "model.safetensors.index.json"
# safetensors refuses headers above 100 MB (HeaderTooLarge).
MAX_HEADER = 100 * 1000 * 1000


def _service_unread(unit):
    return dict(unit=unit, checked=False, load_state=None, active_state=None, sub_state=None, result=None,
                exec_main_status=None, n_restarts=None, active_enter_timestamp=None, stopped=None)


def _model_unchecked(path):
    return dict(checked=False, path=path, index=None, shards=0, missing=[], empty=[], truncated=[], problems=[], ok=None)


def _endpoint_unprobed(base_url, timeout, unix_socket=None):
    return dict(checked=False, base_url=base_url, unix_socket=unix_socket, health_status=None, health_error=None, model=None,
                completion_status=None, completion_error=None, completion_seconds=None, timeout=timeout,
                hang=False, ok=None)


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class Diagnosis(object):
    def __init__(self, module):
        self.module = module
        params = module.params
        unit = params["unit"]
        self.unit = unit if "." in unit else unit + ".service"
        base_url = params["base_url"].rstrip("/") if params["base_url"] else None
        if base_url is None and params["unix_socket"]:
            base_url = "http://localhost"  # over the socket the URL's host is only the Host header
        self.result = dict(
            changed=False,
            service=_service_unread(self.unit),
            findings=[],
            shm_leftovers=[],
            model_check=_model_unchecked(params["model_path"]),
            endpoint=_endpoint_unprobed(base_url, params["timeout"], params["unix_socket"]),
            journal_tail=[],
            healthy=False,
            msg="",
        )

    def fail(self, msg):
        result = dict(self.result, msg=msg, changed=False)
        self.module.fail_json(**result)

    # ---- systemd ---------------------------------------------------------------------------

    def run(self, argv, what):
        rc, out, err = run_c(self.module, argv)
        if rc != 0:
            self.fail("%s failed (rc %d): %s; run the task with become on a host that runs systemd, or analyse a saved "
                      "journal with journal_text" % (what, rc, (err or out).strip() or "no output"))
        return out

    def read_service(self):
        systemctl = self.module.get_bin_path("systemctl")
        if not systemctl:
            self.fail("systemctl not found: this host does not run systemd; to analyse a journal saved elsewhere, "
                      "give its text in journal_text")
        props = parse_properties(self.run(show_argv(systemctl, self.unit, SHOW_PROPERTIES), "systemctl show %s" % self.unit))
        service = dict(
            unit=self.unit,
            checked=True,
            load_state=props.get("LoadState"),
            active_state=props.get("ActiveState"),
            sub_state=props.get("SubState"),
            result=props.get("Result"),
            exec_main_status=_int_or_none(props.get("ExecMainStatus")),
            n_restarts=_int_or_none(props.get("NRestarts")),
            active_enter_timestamp=props.get("ActiveEnterTimestamp"),
        )
        service["stopped"] = service["active_state"] in ("inactive", "failed") or (
            service["active_state"] == "activating" and service["sub_state"] == "auto-restart")
        self.result["service"] = service
        if service["load_state"] == "not-found":
            self.fail("unit %s is not installed on this host (systemctl: LoadState=not-found); set unit to the vLLM "
                      "service's name (vllm_server_service_name), or deploy it with ansible-playbook deploy.yml" % self.unit)

    def read_journal(self):
        journalctl = self.module.get_bin_path("journalctl")
        if not journalctl:
            self.fail("journalctl not found: this host does not run systemd's journal; give a saved journal in journal_text")
        return self.run(journal_argv(journalctl, self.unit, self.module.params["journal_lines"]), "journalctl -u %s" % self.unit)

    # ---- /dev/shm --------------------------------------------------------------------------

    def scan_shm(self, stopped):
        shm_dir = self.module.params["shm_dir"]
        user = self.module.params["service_user"]
        try:
            names = sorted(os.listdir(shm_dir))
        except OSError as exc:
            if not os.path.exists(shm_dir):
                return []
            self.fail("cannot list shm_dir %s: %s; run the task with become" % (shm_dir, to_native(exc.strerror or exc)))
        found = []
        for name in names:
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in SHM_PATTERNS):
                continue
            path = os.path.join(shm_dir, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone since the listing: a process removed it
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = str(st.st_uid)
            found.append(dict(path=path, owner=owner, uid=st.st_uid, size=st.st_size,
                              owned_by_service_user=owner == user, removable=owner == user and stopped is True))
        return found

    def measure_shm(self):
        """dict(total_bytes, free_bytes) of shm_dir, or None when it cannot be measured."""
        try:
            st = os.statvfs(self.module.params["shm_dir"])
        except OSError:
            return None
        return dict(total_bytes=st.f_blocks * st.f_frsize, free_bytes=st.f_bavail * st.f_frsize)

    # ---- model files -----------------------------------------------------------------------

    @staticmethod
    def shard_problem(path, name):
        """(problem line, truncated entry or None) for one shard, or (None, None) when it is whole."""
        if os.path.islink(path) and not os.path.exists(path):
            return "%s is a link to %s, which does not exist" % (name, os.readlink(path)), None
        try:
            size = os.stat(path).st_size
            with open(path, "rb") as handle:
                head = handle.read(8)
                if size == 0:
                    return "%s is empty" % name, None
                if len(head) < 8:
                    return ("%s is truncated: %d bytes, less than the 8-byte header length" % (name, size),
                            dict(file=name, size=size, expected_size=None))
                length = struct.unpack("<Q", head)[0]
                if length > MAX_HEADER:
                    return "%s is not a safetensors file: header length %d" % (name, length), None
                if 8 + length > size:
                    return ("%s is truncated inside its header: %d bytes, the header alone needs %d" % (name, size, 8 + length),
                            dict(file=name, size=size, expected_size=None))
                header = handle.read(length)
        except (IOError, OSError) as exc:
            return "cannot read %s: %s" % (name, to_native(exc.strerror or exc)), None
        try:
            doc = json.loads(header.decode("utf-8"))
            end = max([0] + [int(info["data_offsets"][1]) for key, info in doc.items() if key != "__metadata__"])
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "%s has a header that is not safetensors JSON" % name, None
        expected = 8 + length + end
        if size < expected:
            return ("%s is truncated: %d bytes, its header says %d" % (name, size, expected),
                    dict(file=name, size=size, expected_size=expected))
        if size > expected:
            return ("%s has %d bytes more than its header covers (%d bytes, header says %d)" % (name, size - expected, size, expected),
                    dict(file=name, size=size, expected_size=expected))
        return None, None

    def check_model(self):
        path = self.module.params["model_path"]
        check = dict(_model_unchecked(path), checked=True)
        problems = check["problems"]
        if not os.path.isdir(path):
            problems.append("model directory %s does not exist" % path if not os.path.exists(path)
                            else "model_path %s is not a directory" % path)
            check["ok"] = False
            return check
        index_path = os.path.join(path, INDEX_FILE)
        if os.path.exists(index_path):
            check["index"] = INDEX_FILE
            try:
                with open(index_path, "rb") as handle:
                    weight_map = json.loads(handle.read().decode("utf-8"))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (IOError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                problems.append("%s cannot be read as a safetensors index: %s" % (INDEX_FILE, to_native(exc)))
                shards = []
        else:
            try:
                shards = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
            except OSError as exc:
                self.fail("cannot list model_path %s: %s; run the task with become" % (path, to_native(exc.strerror or exc)))
            if not shards:
                problems.append("%s holds neither %s nor any .safetensors file" % (path, INDEX_FILE))
        check["shards"] = len(shards)
        for name in shards:
            shard = os.path.join(path, name)
            if not os.path.lexists(shard):
                check["missing"].append(name)
                problems.append("%s is missing" % name)
                continue
            problem, truncated = self.shard_problem(shard, name)
            if problem is None:
                continue
            problems.append(problem)
            if truncated:
                check["truncated"].append(truncated)
            elif problem.endswith(" is empty"):
                check["empty"].append(name)
            elif "which does not exist" in problem:
                check["missing"].append(name)
        check["ok"] = not problems
        return check

    # ---- HTTP ------------------------------------------------------------------------------

    def request(self, path, body=None):
        """(status or None, parsed JSON or None, error or None, seconds, timed out)."""
        endpoint = self.result["endpoint"]
        answer = request(endpoint["base_url"] + path, body, self.module.params["api_key"], endpoint["timeout"],
                         unix_socket=endpoint["unix_socket"], use_proxy=False, follow_redirects="none")
        if answer.timed_out:
            error = "no answer within %s s" % endpoint["timeout"]
        elif answer.http_error:
            error = "HTTP %d %s" % (answer.status, answer.reason)
        else:
            error = answer.reason
        return answer.status, answer.json(), error, answer.seconds, answer.timed_out

    def probe(self):
        endpoint = self.result["endpoint"]
        endpoint["checked"] = True
        endpoint["ok"] = False
        status, dummy, error, dummy, dummy = self.request("/health")
        endpoint["health_status"] = status
        if status != 200:
            endpoint["health_error"] = error or "HTTP %s" % status
            if error and "refused" in error.lower():
                endpoint["health_error"] = "%s: nothing listens yet (the model is still loading) or the service is down" % error
            return
        model = self.module.params["served_model_name"]
        if not model:
            status, models, error, dummy, dummy = self.request("/v1/models")
            try:
                model = models["data"][0]["id"]
            except (TypeError, KeyError, IndexError):
                endpoint["completion_error"] = "cannot learn the model name from /v1/models (%s); set served_model_name" % (
                    error or "no model listed")
                return
        try:
            body = probe_request(model)
        except ValueError as exc:
            endpoint["completion_error"] = "%s (served_model_name, or the first id /v1/models lists)" % to_native(exc)
            return
        endpoint["model"] = model
        status, answer, error, seconds, timed_out = self.request(PROBE_PATH, body)
        endpoint.update(completion_status=status, completion_seconds=seconds, completion_error=error, hang=timed_out)
        if status in (401, 403):
            endpoint["completion_error"] = "%s: the server refused the api_key; set api_key (vllm_server_api_key)" % error
        elif status == 200 and not (isinstance(answer, dict) and answer.get("choices")):
            endpoint["completion_error"] = "HTTP 200 without choices in the answer"
        elif status == 200:
            shortfall = probe_shortfall(answer)
            if shortfall:
                endpoint["completion_error"] = "HTTP 200, but %s" % shortfall
        endpoint["ok"] = status == 200 and endpoint["completion_error"] is None

    # ---- main ------------------------------------------------------------------------------

    def message(self, analysis):
        service = self.result["service"]
        findings = self.result["findings"]
        if service["checked"]:
            state = "%s %s" % (self.unit, service["active_state"])
            if service["sub_state"] and service["sub_state"] != service["active_state"]:
                state += "/%s" % service["sub_state"]
            extra = []
            if service["result"] and service["result"] != "success":
                extra.append(service["result"])
            if service["n_restarts"]:
                extra.append("%d restarts" % service["n_restarts"])
            if extra:
                state += " (%s)" % ", ".join(extra)
        else:
            stopped = analysis["journal_stopped"]
            state = "%s (from journal_text: %s)" % (
                self.unit, "stopped" if stopped else "started" if stopped is False else "state unknown")
        if findings:
            return "%s: %s" % (state, "; ".join(finding["title"] for finding in findings))
        endpoint = self.result["endpoint"]
        if self.result["healthy"]:
            if endpoint["checked"]:
                return "%s: healthy, a two-token completion took %s s" % (state, endpoint["completion_seconds"])
            return "%s: no known failure in the journal" % state
        if endpoint["checked"] and not endpoint["ok"] and service["stopped"] is not True:
            return "%s: no known failure; endpoint: %s" % (state, endpoint["health_error"] or endpoint["completion_error"])
        return "%s: no known failure matched; read journal_tail" % state

    def main(self):
        params = self.module.params
        if params["journal_lines"] < 1:
            self.fail("journal_lines must be at least 1, got %d" % params["journal_lines"])
        if params["timeout"] < 1:
            self.fail("timeout must be at least 1 second, got %d" % params["timeout"])
        base_url = self.result["endpoint"]["base_url"]
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            self.fail("base_url %r must start with http:// or https://, for example http://127.0.0.1:8000" % params["base_url"])

        if params["journal_text"] is None:
            self.read_service()
            text = self.read_journal()
            stopped = self.result["service"]["stopped"]
        else:
            text = params["journal_text"]
            stopped = None
        if stopped is None:
            stopped = journal_stopped(text)
            self.result["service"]["stopped"] = stopped
        self.result["shm_leftovers"] = self.scan_shm(stopped)
        # A shm_dir that does not exist was not looked at (a journal from elsewhere): nothing to say of it.
        looked = os.path.isdir(params["shm_dir"])
        shm_space = self.measure_shm() if looked else None
        if params["model_path"]:
            self.result["model_check"] = self.check_model()
        if base_url is not None:
            self.probe()

        analysis = diagnose(
            text,
            unit=self.unit,
            service_user=params["service_user"],
            since_last_start=params["since_last_start"],
            stopped=stopped,
            shm_files=self.result["shm_leftovers"] if looked else None,
            model_check=self.result["model_check"],
            endpoint=self.result["endpoint"],
            shm_space=shm_space,
        )
        self.result["findings"] = analysis["findings"]
        self.result["journal_tail"] = analysis["journal_tail"]
        service = self.result["service"]
        if service["checked"]:
            running = service["active_state"] == "active"
        else:
            running = stopped is False or (stopped is None and not analysis["has_error"])
        endpoint = self.result["endpoint"]
        # A finding the host contradicts (what the journal said, not the state now) is no failure.
        failures = [finding for finding in analysis["findings"] if not finding["details"].get("contradicted_by")]
        self.result["healthy"] = bool(not failures and running and (endpoint["ok"] or not endpoint["checked"]))
        self.result["msg"] = self.message(analysis)
        return self.result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="vllm.service"),
            journal_lines=dict(type="int", default=400),
            since_last_start=dict(type="bool", default=False),
            journal_text=dict(type="str"),
            shm_dir=dict(type="path", default="/dev/shm"),
            service_user=dict(type="str", default="vllm"),
            model_path=dict(type="path"),
            base_url=dict(type="str"),
            unix_socket=dict(type="path"),
            api_key=dict(type="str", no_log=True),
            served_model_name=dict(type="str"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**Diagnosis(module).main())


if __name__ == "__main__":
    main()
