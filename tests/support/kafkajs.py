"""KafkaJS (pinned in tests/integration/kafkajs, installed there by ``scripts/test.sh``
with ``npm ci``) run as a Node.js process on one scenario of ``client.js``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

KAFKAJS_DIR = Path(__file__).parent.parent / "integration" / "kafkajs"


def command(scenario: str, bootstrap: str, topic: str) -> list[str]:
    node = shutil.which("node")
    assert node is not None, "Node.js is not installed: scripts/test.sh installs it (apt-get install nodejs npm)"
    assert (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir(), \
        f"KafkaJS is not installed: run `npm ci --prefix {KAFKAJS_DIR}` (scripts/test.sh does)"
    return [node, str(KAFKAJS_DIR / "client.js"), scenario, bootstrap, topic]


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1", **extra}


def run(scenario: str, bootstrap: str, topic: str) -> Any:
    """The scenario's JSON answer; fails the test on any exit status or stderr output."""
    res = subprocess.run(command(scenario, bootstrap, topic), capture_output=True, text=True,
                         timeout=120, env=environment())
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr == ""
    return json.loads(res.stdout)
