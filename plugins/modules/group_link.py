#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: group_link
short_description: Prove that a serving group's members reach its head on the rendezvous port, over the group's network
version_added: "0.9.0"
description:
  - A serving group's ranks meet at its head's rendezvous port (vLLM's C(--master-port)) and talk over the group's
    interface. This module proves the way before anything changes, in two halves run on different hosts.
  - On the head, O(listen) binds O(port) on O(address) and accepts connections until every address of O(expect) has
    connected from its own address, or O(timeout) seconds pass; run it with C(async) so that the members can connect
    meanwhile. Where the port is taken already (the group's engine runs and holds it), it does not listen and says so in
    RV(in_use) - the members then connect to the engine itself, which lets only the group's members in.
  - On a member, without O(listen), it connects from O(source) (the member's own address on the group's interface) to
    O(address):O(port), trying again every half second until O(timeout) seconds pass, and closes the connection.
author:
  - fleet.vllm developers (@fleet-vllm)
attributes:
  check_mode:
    support: full
    description: Runs in check mode too, exactly as without it; it only opens a listener or a connection for the test.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
extends_documentation_fragment: [fleet.vllm.attributes]
options:
  listen:
    description: Listen (the head's half), instead of connecting.
    type: bool
    default: false
  address:
    description: With O(listen), the address to bind; else the head's address to connect to.
    type: str
    required: true
  port:
    description: The rendezvous port.
    type: int
    required: true
  source:
    description: The address to connect from (the member's own on the group's interface). Not with O(listen).
    type: str
  expect:
    description: With O(listen), the addresses that must connect.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for the connections (O(listen)) or for one (without O(listen)).
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Listen on the head's rendezvous port for the other members
  fleet.vllm.group_link:
    listen: true
    address: 10.0.3.11
    port: 29500
    expect: [10.0.3.12, 10.0.3.13]
  async: 90
  poll: 0
  register: listening

- name: Connect from a member to the head
  fleet.vllm.group_link:
    address: 10.0.3.11
    port: 29500
    source: 10.0.3.12
"""

RETURN = r"""
in_use:
  description: With O(listen), whether the port was taken already (then nothing listened, and RV(seen) is empty).
  returned: always
  type: bool
seen:
  description: With O(listen), the addresses of O(expect) that connected.
  returned: always
  type: list
  elements: str
missing:
  description: With O(listen), the addresses of O(expect) that did not connect within O(timeout).
  returned: always
  type: list
  elements: str
connected:
  description: Without O(listen), whether the connection was made.
  returned: always
  type: bool
error:
  description: Without O(listen), why the last try failed (V(null) once connected).
  returned: always
  type: str
elapsed:
  description: Seconds the module waited.
  returned: always
  type: float
"""

import errno
import ipaddress
import select
import socket
import time

from ansible.module_utils.basic import AnsibleModule


def _family(address):
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


def _canonical(address):
    """An address as the kernel reports a peer: IPv4-mapped IPv6 back to IPv4."""
    parsed = ipaddress.ip_address(address.split("%", 1)[0])
    if parsed.version == 6 and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return str(parsed)


def listen(address, port, expect, timeout):
    """Accept connections on address:port until every expected address connected or timeout seconds pass."""
    expected = {_canonical(item) for item in expect}
    server = socket.socket(_family(address), socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((address, port))
    except OSError as exc:
        server.close()
        if exc.errno == errno.EADDRINUSE:
            return dict(in_use=True, seen=[], missing=[])
        raise
    seen = set()
    try:
        server.listen(16)
        deadline = time.monotonic() + timeout
        while not expected <= seen:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _unused, _unused2 = select.select([server], [], [], left)
            if not ready:
                continue
            conn, peer = server.accept()
            conn.close()
            seen.add(_canonical(peer[0]))
    finally:
        server.close()
    return dict(in_use=False, seen=sorted(seen & expected), missing=sorted(expected - seen))


def connect(address, port, source, timeout):
    """Connect from source to address:port, trying again until timeout seconds pass."""
    deadline = time.monotonic() + timeout
    error = None
    while True:
        sock = socket.socket(_family(address), socket.SOCK_STREAM)
        sock.settimeout(max(min(5.0, deadline - time.monotonic()), 0.5))
        try:
            if source:
                sock.bind((source, 0))
            sock.connect((address, port))
            return dict(connected=True, error=None)
        except OSError as exc:
            error = "%s:%d from %s: %s" % (address, port, source or "any address", exc.strerror or exc)
        finally:
            sock.close()
        if time.monotonic() >= deadline:
            return dict(connected=False, error=error)
        time.sleep(0.5)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            listen=dict(type="bool", default=False),
            address=dict(type="str", required=True),
            port=dict(type="int", required=True),
            source=dict(type="str"),
            expect=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=30),
        ),
        mutually_exclusive=[("listen", "source")],
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["port"] <= 65535:
        module.fail_json(msg="port is %d: a port number is 1 to 65535" % p["port"])
    for name in ("address", "source"):
        if p[name]:
            try:
                ipaddress.ip_address(p[name])
            except ValueError:
                module.fail_json(msg="%s is %r: give an IP address" % (name, p[name]))
    started = time.monotonic()
    result = dict(changed=False, in_use=False, seen=[], missing=[], connected=False, error=None)
    try:
        if p["listen"]:
            result.update(listen(p["address"], p["port"], p["expect"], p["timeout"]))
        else:
            result.update(connect(p["address"], p["port"], p["source"], p["timeout"]))
    except (OSError, ValueError) as exc:
        module.fail_json(msg="cannot %s %s:%d: %s" % ("listen on" if p["listen"] else "connect to", p["address"], p["port"], exc))
    result["elapsed"] = round(time.monotonic() - started, 2)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
