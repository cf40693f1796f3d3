# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes the collection's modules share, as community.general's ``attributes`` fragment
gives them: DOCUMENTATION (fleet.vllm.attributes) the platform every module runs on, and one part
for each way a module takes check mode and diff mode. A module names the fragment and its part in
extends_documentation_fragment; what its own ``attributes:`` says of an attribute (a description
that says more) replaces the fragment's words, and the support level stays the fragment's."""

from __future__ import annotations


class ModuleDocFragment:
    # Every module: it runs on the host it reads or changes, a POSIX system.
    DOCUMENTATION = r"""
options: {}
attributes:
  platform:
    support: full
    platforms: posix
    description: Runs on the host it reads or changes.
"""

    # A module that only reads (fleet.vllm.attributes.read_only).
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Runs in check mode too, exactly as without it; it only reads.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
"""

    # A module that changes files or links and shows them before and after (fleet.vllm.attributes.changes_with_diff).
    CHANGES_WITH_DIFF = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Reports what would change, with the diff in diff mode, and changes nothing.
  diff_mode:
    support: full
    description: Shows what changes, before and after.
"""

    # A module that changes something a text diff does not show (a service's state, a venv, a
    # stored record): its return values say what changes (fleet.vllm.attributes.changes_without_diff).
    CHANGES_WITHOUT_DIFF = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Reports what would change, and changes nothing.
  diff_mode:
    support: none
    description: What changes is not shown as a diff; the return values say what would change.
"""
