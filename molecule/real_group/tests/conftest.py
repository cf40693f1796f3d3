"""pytest setup of the real_group scenario's verify steps: puts this directory on sys.path so that a test module can
``import group_checks`` (molecule/conftest.py already puts molecule/shared there)."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
