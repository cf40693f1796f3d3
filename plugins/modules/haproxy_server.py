#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain a server of an HAProxy backend and put it back, through HAProxy's runtime API
version_added: "0.2.0"
description:
  - Talks to HAProxy's runtime API (the C(stats socket) with C(level admin), since HAProxy
    refuses C(set server) below it) on the host of the load balancer. Nothing is reloaded and the
    configuration file is not touched. The role C(fleet.vllm.vllm_gateway) makes that socket
    C(mode 600), root's only, so the module runs as root (C(become)).
  - O(state=drain) sends C(set server BACKEND/SERVER state drain) (no new requests, the ones in
    flight go on) and, with O(wait_timeout), waits until the server has no request in flight
    and none queued (C(scur) and C(qcur) of C(show stat)), or the timeout passes.
  - O(state=ready) sends C(set server BACKEND/SERVER state ready) and, with O(wait_timeout),
    waits until HAProxy's own health checks say the server is C(UP) with no failed check pending;
    it fails when they do not within the timeout, so that a rolling upgrade stops before it takes
    the next server away. C(UP 1/2) (up, but its last check failed, and one more failure takes it
    down) is not enough, since a check that failed while the engine restarted must be followed by
    a good one.
  - O(state=maint) sends C(set server BACKEND/SERVER state maint).
  - A server that the backend does not have is reported (RV(found) is V(false)) with a warning,
    and nothing changes; a host onboarded with C(--limit) is added to the gateway by its next run.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    description: Reads the server's state and reports what would change; sends no command and does not wait.
  diff_mode:
    description: The administrative state is reported in RV(admin_state_before) and RV(admin_state_after).
  platform:
    description: Runs on the HAProxy host.
extends_documentation_fragment: [fleet.vllm.attributes, fleet.vllm.attributes.changes_without_diff]
options:
  socket:
    description: HAProxy's runtime API socket (C(stats socket ... level admin) in C(global)).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: The backend the server is in.
    type: str
    required: true
  server:
    description: The server's name in that backend.
    type: str
    required: true
  state:
    description: The administrative state to set.
    type: str
    choices: [ready, drain, maint]
    required: true
  wait_timeout:
    description:
      - Seconds to wait, after the change, for the server to be empty (O(state=drain)) or C(UP) with no failed
        check pending (O(state=ready)).
        V(0) does not wait.
    type: int
    default: 0
  interval:
    description: Seconds between two reads while waiting.
    type: float
    default: 0.5
"""

EXAMPLES = r"""
- name: Stop sending requests to gpu-node-05, and wait up to 5 minutes for the ones in flight
  fleet.vllm.haproxy_server:
    backend: fleet_vllm
    server: gpu-node-05
    state: drain
    wait_timeout: 300

- name: Put it back once HAProxy's checks say it is up
  fleet.vllm.haproxy_server:
    backend: fleet_vllm
    server: gpu-node-05
    state: ready
    wait_timeout: 120
"""

RETURN = r"""
found:
  description: Whether the backend has the server.
  returned: always
  type: bool
admin_state_before:
  description: The administrative state before the module ran (V(ready), V(drain), V(maint), or V(null) when not found).
  returned: always
  type: str
admin_state_after:
  description: The administrative state after it ran (what it would be, in check mode).
  returned: always
  type: str
status:
  description: The server's status as C(show stat) says it at the end (such as C(UP), C(DOWN), C(DRAIN), C(MAINT)).
  returned: always
  type: str
sessions:
  description: Requests in flight on the server at the end (C(scur)).
  returned: always
  type: int
queued:
  description: Requests queued for the server at the end (C(qcur)).
  returned: always
  type: int
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
timed_out:
  description: Whether O(wait_timeout) passed before the server was empty (drain); a drain that times out does not fail.
  returned: always
  type: bool
"""

import csv
import io
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

# srv_admin_state bits of "show servers state" (HAProxy 2.6 include/haproxy/server-t.h, SRV_ADMF_*),
# tested the way HAProxy tests them (src/stats.c prints MAINT for cur_admin & SRV_ADMF_MAINT).
# SRV_ADMF_MAINT (0x23): forced (0x01), inherited (0x02), resolution-failure (0x20) maintenance.
# Not in it: 0x04 SRV_ADMF_CMAINT ("disabled" in the configuration, set with 0x01; left alone
# when "set server ... state ready" clears 0x01, and the server serves) and 0x40 SRV_ADMF_HMAINT
# ("the server FQDN has been set from socket stats", SRV_ADMF_FQDN_CHANGED since HAProxy 3.1).
SRV_ADMF_MAINT = 0x01 | 0x02 | 0x20
SRV_ADMF_DRAIN = 0x08 | 0x10  # forced, inherited drain


class RuntimeApiError(Exception):
    pass


def ask(path, command, timeout=10.0):
    """One command on HAProxy's runtime API socket, its whole answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(to_bytes(command + "\n"))
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise RuntimeApiError("HAProxy's runtime API at %s: %s" % (path, exc))
    finally:
        sock.close()
    return to_text(b"".join(chunks))


def parse_servers_state(text, backend, server):
    """srv_admin_state of BACKEND/SERVER from "show servers state BACKEND", or None."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = None
    for line in lines:
        if line.startswith("#"):
            header = line.lstrip("#").split()
            continue
        if header is None:
            continue
        fields = dict(zip(header, line.split()))
        if fields.get("be_name") == backend and fields.get("srv_name") == server:
            return int(fields["srv_admin_state"])
    return None


def parse_stat(text, backend, server):
    """{status, scur, qcur} of BACKEND/SERVER from "show stat" CSV, or None."""
    text = text.lstrip("# ")
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("pxname") == backend and row.get("svname") == server:
            return {"status": row.get("status") or "", "scur": int(row.get("scur") or 0), "qcur": int(row.get("qcur") or 0)}
    return None


def admin_name(bits):
    if bits is None:
        return None
    if bits & SRV_ADMF_MAINT:
        return "maint"
    if bits & SRV_ADMF_DRAIN:
        return "drain"
    return "ready"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/haproxy/admin.sock"),
            backend=dict(type="str", required=True),
            server=dict(type="str", required=True),
            state=dict(type="str", choices=["ready", "drain", "maint"], required=True),
            wait_timeout=dict(type="int", default=0),
            interval=dict(type="float", default=0.5),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, found=False, admin_state_before=None, admin_state_after=None, status="",
                  sessions=0, queued=0, waited=0.0, timed_out=False)
    if p["wait_timeout"] < 0 or p["interval"] <= 0:
        module.fail_json(msg="wait_timeout must be 0 or more and interval more than 0", **result)

    def stat():
        return parse_stat(ask(p["socket"], "show stat"), p["backend"], p["server"])

    try:
        bits = parse_servers_state(ask(p["socket"], "show servers state %s" % p["backend"]), p["backend"], p["server"])
        if bits is None:
            module.warn("HAProxy at %s has no server %s in backend %s: nothing to %s (a host onboarded with --limit "
                        "joins the gateway when the gateways are in a run)" % (p["socket"], p["server"], p["backend"], p["state"]))
            module.exit_json(**result)
        result["found"] = True
        result["admin_state_before"] = admin_name(bits)
        result["admin_state_after"] = p["state"]
        result["changed"] = result["admin_state_before"] != p["state"]
        if module.check_mode:
            now = stat() or {}
            result.update(status=now.get("status", ""), sessions=now.get("scur", 0), queued=now.get("qcur", 0))
            module.exit_json(**result)
        if result["changed"]:
            answer = ask(p["socket"], "set server %s/%s state %s" % (p["backend"], p["server"], p["state"])).strip()
            if answer:  # the command answers nothing on success
                module.fail_json(msg="HAProxy refused 'set server %s/%s state %s': %s"
                                 % (p["backend"], p["server"], p["state"], answer), **result)
        started = time.monotonic()
        deadline = started + p["wait_timeout"]
        while True:
            now = stat() or {"status": "", "scur": 0, "qcur": 0}
            result.update(status=now["status"], sessions=now["scur"], queued=now["qcur"])
            if p["state"] == "drain":
                done = now["scur"] == 0 and now["qcur"] == 0
            elif p["state"] == "ready":
                # "UP 1/2" is a server going down (its last check failed), not one that is up.
                done = now["status"] == "UP"
            else:
                done = True
            if done or time.monotonic() >= deadline:
                break
            time.sleep(p["interval"])
        result["waited"] = round(time.monotonic() - started, 2)
        if not done:
            result["timed_out"] = True
            if p["state"] == "ready":
                module.fail_json(msg="%s/%s is back in rotation but HAProxy's checks did not find it UP within %d s "
                                 "(status %s): the gateway cannot reach its front door, or its engine does not answer"
                                 % (p["backend"], p["server"], p["wait_timeout"], now["status"]), **result)
            module.warn("%s/%s still had %d requests in flight and %d queued after %d s of draining; going on"
                        % (p["backend"], p["server"], now["scur"], now["qcur"], p["wait_timeout"]))
    except RuntimeApiError as exc:
        module.fail_json(msg="%s (is HAProxy running with 'stats socket %s level admin', and does this run as the socket's "
                         "owner?)" % (exc, p["socket"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
