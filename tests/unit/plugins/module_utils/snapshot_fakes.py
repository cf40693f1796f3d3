"""What the tests of hf_snapshot's module_utils give in place of AnsibleModule: its options (the
module's defaults), check_mode, warn(), tmpdir, get_bin_path() and run_command(), which records
each command and answers from a list."""

from __future__ import annotations

import os

# hf_snapshot's options with their defaults (its argument_spec).
DEFAULTS = dict(repo_id="nvidia/Kimi-K2.5-NVFP4", revision="main", dest=None, state="present",
                endpoint="https://huggingface.co", token=None, allow_patterns=None, ignore_patterns=None, max_workers=8,
                disable_xet=False, python=None, peer=None, peer_fallback=False, peer_wait=3600, offline=False, deep=False,
                disk_margin_percent=5, retries=5, retry_delay=10.0, stall_timeout=300, request_timeout=60, listing=None,
                verified_record=None, progress_file=None, progress_interval=10, variable_prefix="", variables={})
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeModule(object):
    """``answers``: what run_command returns, in order - (rc, stdout, stderr), or a function of (argv, options)
    returning one. ``commands``: (argv, options, the HF_* and LC_ALL environment it ran with)."""

    def __init__(self, tmp_path, **params):
        self.params = dict(DEFAULTS, dest=str(tmp_path / "dest"), **params)
        self.check_mode = False
        self.tmpdir = str(tmp_path / "module-tmp")
        os.makedirs(self.tmpdir, exist_ok=True)
        self.warnings = []
        self.bins = dict(rsync="/usr/bin/rsync", setpriv=None)
        self.answers = []
        self.commands = []

    def warn(self, text):
        self.warnings.append(text)

    def get_bin_path(self, name):
        return self.bins.get(name)

    def run_command(self, argv, **options):
        env = dict((key, value) for key, value in os.environ.items() if key.startswith(("HF_", "HUGGING")) or key in (
            "LC_ALL", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE"))
        self.commands.append((argv, options, env))
        answer = self.answers.pop(0)
        return answer(argv, options) if callable(answer) else answer
