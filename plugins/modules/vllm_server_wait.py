#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_server_wait
short_description: Wait for a vLLM server to load its model, then prove it answers
version_added: "0.1.0"
description:
  - Polls C(GET /health) of a vLLM OpenAI-compatible server until it answers 200. A refused or
    timed-out connection means the model is still loading (500 GB take tens of minutes).
  - Meanwhile, with O(unit) set, watches the systemd unit - when it fails, stops, or restarts
    (C(NRestarts) grows, C(SubState=auto-restart)) the module fails at once with the last
    O(journal_lines) lines of its journal, instead of waiting for the timeout. A 503 from
    C(/health) (the engine died) fails the same way.
  - When it fails so, the message leads with what the journal shows, read as
    M(fleet.vllm.vllm_diagnose) reads it - the known failure, its cause and its fix, or else the
    first error of the failed start - then the journal's last lines. The cause of a dead engine is
    often further up than those lines (an engine core's traceback is hundreds of lines).
  - Then, with O(check_models), C(GET /v1/models) must list O(served_model_name); with
    O(check_completion), a two-token C(POST /v1/chat/completions) must return a choice
    (C(/health) can stay 200 while the engine hangs, vLLM issue 39863).
  - The completion is the collection's one probe (also M(fleet.vllm.vllm_diagnose)'s and the
    gateways' check) - C(max_tokens) 2 with vLLM's C(min_tokens) 2 and C(ignore_eos), so that the
    second token comes out of a decode step even when the model's first token is its
    end-of-sequence token. An answer whose C(usage.completion_tokens) is below 2 fails, since no decode
    step ran.
  - Only reads; it changes nothing.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description:
      - Waits for C(/health) and reads C(/v1/models) as without it, but sends no completion (it makes
        the engine generate); RV(completion) is then V(null).
  platform:
    description: Runs on the host of the service.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.read_only]
options:
  url:
    description:
      - Base URL of the server.
      - With O(unix_socket), its host is only what the C(Host) header says; use V(http://localhost).
    type: str
    default: http://127.0.0.1:8000
  unix_socket:
    description:
      - The path of the Unix socket the server listens on (vLLM's C(--uds PATH)). When set, every request
        goes over it, not to the host and port of O(url).
      - A socket that does not exist yet, or that refuses the connection, counts as a server still loading,
        as a refused port does.
      - The messages name the socket after the URL, for example C(http://localhost/health over
        unix:/run/fleet-vllm/vllm/engine.sock).
    type: path
  unit:
    description: The systemd unit serving it, such as C(vllm.service). Not set, only the endpoint is watched.
    type: str
  served_model_name:
    description: The model name the server must list and answer to. Required with O(check_models) or O(check_completion).
    type: str
  api_key:
    description: The server's API key (C(VLLM_API_KEY)), sent as a bearer token. Not set, no C(Authorization) header is sent.
    type: str
  timeout:
    description: Seconds to wait for C(/health) to answer 200.
    type: int
    default: 3600
  interval:
    description: Seconds between polls.
    type: int
    default: 10
  request_timeout:
    description: Seconds one request may take (the first completion after a load can be slow).
    type: int
    default: 300
  check_models:
    description: Require O(served_model_name) in C(/v1/models).
    type: bool
    default: true
  check_completion:
    description: Require a two-token chat completion (a prefill and a decode step).
    type: bool
    default: true
  journal_lines:
    description: Journal lines to return when the unit dies.
    type: int
    default: 50
"""

EXAMPLES = r"""
- name: Wait for the model to load and answer
  fleet.vllm.vllm_server_wait:
    url: http://127.0.0.1:8000
    unit: vllm.service
    served_model_name: kimi-k2.5
    timeout: 3600

- name: Wait for the engine behind a Unix socket (vllm serve --uds), which has no API key
  fleet.vllm.vllm_server_wait:
    url: http://localhost
    unix_socket: /run/fleet-vllm/vllm/engine.sock
    unit: vllm.service
    served_model_name: kimi-k2.5
"""

RETURN = r"""
ready:
  description: Whether the server answered everything asked of it.
  returned: always
  type: bool
elapsed:
  description: Seconds waited.
  returned: always
  type: int
health_status:
  description: The last HTTP status of C(/health); V(null) while the connection was refused.
  returned: always
  type: int
models:
  description: The model ids C(/v1/models) lists.
  returned: always
  type: list
  elements: str
completion:
  description: The text of the two-token completion; V(null) when not asked.
  returned: always
  type: str
completed_at:
  description:
    - When the two-token completion answered, in seconds since the epoch by the host's clock (the journal's), so that
      M(fleet.vllm.vllm_start_phases) can place the first completion among a start's phases; V(null) when none was sent.
  returned: always
  type: float
unit_state:
  description: The unit's C(ActiveState), C(SubState), C(Result) and C(NRestarts) at the last poll; empty without O(unit).
  returned: always
  type: dict
journal:
  description: The last lines of the unit's journal when it died, else empty.
  returned: always
  type: list
  elements: str
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible_collections.fleet.vllm.plugins.module_utils import _failures, _journal_text, _readiness, _units

# Journal lines read to find the cause of a death (a worker's traceback and the engine core's and
# API server's after it run to a few hundred lines).
CAUSE_WINDOW = 1000
# What the unit watch reads of the unit at each poll.
WATCHED = ("ActiveState", "SubState", "Result", "NRestarts")


def cause_of(journal, unit):
    """What the journal says of a death, for the failure message: '' when it says nothing known."""
    if not journal:
        return ""
    text = "\n".join(journal)
    findings = [f for f in _failures.diagnose(text, unit=unit)["findings"] if f["id"] != "engine_core_died"]
    if findings:
        return "".join("; %s (%s): %s Fix: %s The journal: %s" % (f["title"], f["id"], f["cause"], f["remedy"], " | ".join(f["evidence"]))
                       for f in findings)
    error = _journal_text.root_error(_journal_text.relevant(_journal_text.parse(text), False))
    return "; the first error of the failed start: %s" % error.msg.strip() if error is not None else ""


class Waiter(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.base = self.params["url"].rstrip("/")
        self.unix_socket = self.params["unix_socket"]
        self.result = dict(changed=False, ready=False, elapsed=0, health_status=None, models=[],
                           completion=None, completed_at=None, unit_state={}, journal=[])
        self.start = time.time()

    def fail(self, msg):
        self.result["elapsed"] = int(time.time() - self.start)
        self.module.fail_json(msg=msg, **self.result)

    def where(self, path):
        """The URL of ``path`` for messages, with the Unix socket when one is used."""
        return _units.where(self.base + path, self.unix_socket)

    def request(self, path, body=None):
        """(status, body) or (None, reason) when nothing answered."""
        answer = _units.request(self.base + path, body, self.params["api_key"], self.params["request_timeout"],
                                unix_socket=self.unix_socket, validate_certs=False)
        return (answer.status, answer.body) if answer.status is not None else (None, answer.reason)

    def unit_state(self):
        systemctl = self.module.get_bin_path("systemctl", required=True)
        rc, out, err = _units.run_c(self.module, _units.show_argv(systemctl, self.params["unit"], WATCHED))
        if rc != 0:
            self.fail("cannot read the state of %s: %s" % (self.params["unit"], err.strip()))
        state = _units.parse_properties(out)
        self.result["unit_state"] = state
        return state

    def journal(self):
        journalctl = self.module.get_bin_path("journalctl")
        if not journalctl or not self.params["unit"]:
            return []
        lines = max(self.params["journal_lines"], CAUSE_WINDOW)
        rc, out, err = _units.run_c(self.module, _units.journal_argv(journalctl, self.params["unit"], lines))
        return out.splitlines() if rc == 0 else ["journalctl failed: %s" % err.strip()]

    def died(self, why):
        journal = self.journal()
        self.result["journal"] = journal[-self.params["journal_lines"]:] if self.params["journal_lines"] > 0 else []
        self.fail("%s%s; the last lines of its journal:\n%s" % (why, cause_of(journal, self.params["unit"]),
                                                                "\n".join(self.result["journal"])))

    def wait_health(self):
        restarts = None
        if self.params["unit"]:
            restarts = self.unit_state().get("NRestarts")
        deadline = self.start + self.params["timeout"]
        while True:
            if self.params["unit"]:
                state = self.unit_state()
                if state.get("ActiveState") in ("failed", "inactive", "deactivating") or state.get("SubState") == "auto-restart" \
                        or state.get("NRestarts") != restarts:
                    self.died("%s is %s/%s (result %s, %s restarts) while the model was loading" % (
                        self.params["unit"], state.get("ActiveState"), state.get("SubState"), state.get("Result"),
                        state.get("NRestarts")))
            status, body = self.request("/health")
            self.result["health_status"] = status
            if status == 200:
                return
            if status == 503:
                self.died("%s answers 503: the engine died" % self.where("/health"))
            if time.time() >= deadline:
                self.fail("%s did not answer 200 within %d seconds (last: %s); raise the timeout if the model "
                          "is still loading" % (self.where("/health"), self.params["timeout"],
                                                "HTTP %s" % status if status else to_text(body)))
            time.sleep(max(1, self.params["interval"]))

    def check_models(self):
        status, body = self.request("/v1/models")
        if status != 200:
            self.fail("%s answers %s: %s" % (self.where("/v1/models"), status, to_text(body)[:500]))
        try:
            self.result["models"] = [m.get("id") for m in json.loads(body).get("data", [])]
        except (ValueError, AttributeError) as exc:
            self.fail("%s is not a model list: %s" % (self.where("/v1/models"), to_native(exc)))
        if self.params["served_model_name"] not in self.result["models"]:
            self.fail("%s lists %s, not %s" % (self.where("/v1/models"), ", ".join(map(str, self.result["models"])) or "nothing",
                                               self.params["served_model_name"]))

    def check_completion(self):
        try:
            payload = _readiness.probe_request(self.params["served_model_name"])
        except ValueError as exc:
            self.fail("served_model_name: %s" % to_native(exc))
        status, body = self.request(_readiness.PROBE_PATH, payload)
        if status != 200:
            # /health said 200: the engine behind it may be dead or hung; its journal says why.
            self.died("a two-token chat completion answers %s although /health answers 200: %s" % (
                status if status else "nothing", to_text(body)[:500]))
        try:
            answer = json.loads(body)
            choice = answer["choices"][0]
            message = choice.get("message") or {}
            self.result["completion"] = to_text(message.get("content") or message.get("reasoning_content") or "")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            self.fail("a two-token chat completion returned no choice (%s): %s" % (to_native(exc), to_text(body)[:500]))
        shortfall = _readiness.probe_shortfall(answer)
        if shortfall:
            self.fail("%s answered, but %s: %s" % (self.where(_readiness.PROBE_PATH), shortfall, to_text(body)[:500]))
        self.result["completed_at"] = time.time()

    def run(self):
        self.wait_health()
        if self.params["check_models"]:
            self.check_models()
        if self.params["check_completion"] and self.module.check_mode:
            # A completion makes the engine generate (and lands in its logs and metrics): check mode sends none.
            self.module.warn("check mode: the two-token completion was not sent")
        elif self.params["check_completion"]:
            self.check_completion()
        self.result["ready"] = True
        self.result["elapsed"] = int(time.time() - self.start)
        self.module.exit_json(**self.result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            unix_socket=dict(type="path"),
            unit=dict(type="str"),
            served_model_name=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="int", default=3600),
            interval=dict(type="int", default=10),
            request_timeout=dict(type="int", default=300),
            check_models=dict(type="bool", default=True),
            check_completion=dict(type="bool", default=True),
            journal_lines=dict(type="int", default=50),
        ),
        required_if=[("check_models", True, ("served_model_name",)),
                     ("check_completion", True, ("served_model_name",))],
        supports_check_mode=True,
    )
    Waiter(module).run()


if __name__ == "__main__":
    main()
