"""pytest setup of the Molecule scenarios' testinfra tests (molecule/*/tests, molecule/shared).

Puts molecule/shared on sys.path so a test module can ``import fleet_hosts``. The repository's
own test suite (pytest.ini: tests/unit, tests/integration) never collects molecule/.
"""

from __future__ import annotations

import os
import sys

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shared")
if SHARED not in sys.path:
    sys.path.insert(0, SHARED)
