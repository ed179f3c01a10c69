"""A dmq command leaves nothing behind in the directory it runs in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.cli import dmq_env


def test_a_command_leaves_no_files_in_the_working_directory(tmp_path: Path) -> None:
    # With the test extras installed, kio builds Hypothesis strategies on import, and
    # Hypothesis wrote its cache to ./.hypothesis wherever dmq ran.
    env = dmq_env()
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    for args in (["--version"], ["topics", "--help"]):
        res = subprocess.run([sys.executable, "-m", "dmq", *args], cwd=tmp_path, env=env,
                             capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr
    assert os.listdir(tmp_path) == []
