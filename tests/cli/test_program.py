"""The ``dmq`` program does not import Hypothesis (kio would, where it is installed: 0.3-0.4 s
and about 9 MB of every broker and CLI process), while dmq imported as a library keeps it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Runs ``python -m dmq --version`` as runpy does for -m, then tells what it imported.
PROGRAM = """
import runpy, sys
sys.argv = ["dmq", "--version"]
try:
    runpy.run_module("dmq", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("kio" in sys.modules, sys.modules.get("hypothesis") is not None)
"""


def child(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True).stdout.splitlines()[-1]


def test_the_program_leaves_hypothesis_out() -> None:
    pytest.importorskip("hypothesis")  # installed with the test extras, so kio would import it
    assert child(PROGRAM) == "True False"
    assert child("import sys, dmq.server.broker; print(sys.modules.get('hypothesis') is not None)") == "True"
