# -*- coding: utf-8 -*-
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The directories and files of fleet.vllm.managed_files, which fleet.vllm.host_state compares with
the host (one argument spec: plugins/module_utils/_managed_files.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  directories:
    description:
      - Directories with their owner and mode (M(fleet.vllm.managed_files) creates missing ones with missing parents,
        root-owned 0755, before the files).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      mode:
        description: Its mode, in octal (V("0755")).
        type: str
        required: true
      # A file's owner and group are these (the YAML aliases below).
      owner: &owner
        description: Its owner.
        type: str
        default: root
      group: &group
        description: Its group.
        type: str
        default: root
  files:
    description: Files with their content, owner and mode. M(fleet.vllm.managed_files) needs their directories to exist or be in O(directories).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: What the file must hold. Exactly one of O(files[].content), O(files[].secret_content) and O(files[].src).
        type: str
      secret_content:
        description: What the file must hold, never shown (diff, result, logged arguments).
        type: str
      src:
        description:
          - A file on the host whose content this file must hold; its content is never shown.
          - In check mode a missing O(files[].src) counts as a change (an earlier task of the run would have written it).
        type: path
      mode:
        description: Its mode, in octal (V("0644")).
        type: str
        required: true
      owner: *owner
      group: *group
      validate:
        description:
          - A command run on the temporary file before it replaces the path, C(%s) standing for the temporary file;
            the file is not written when it fails.
        type: str
"""
