"""The README's metrics commands, run verbatim, as tests/test_readme.py runs the quickstart.

The blocks after ``<!-- metrics: background -->`` (the broker, kept running) and
``<!-- metrics -->`` run in order with ``bash -euo pipefail``, the virtualenv's
``bin`` first on PATH, inside a network namespace of the test's own so the
README's literal ports are free whatever else runs here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.netns import available as netns_unavailable
from support.readme import ReadmeRun, readme_blocks

NS = f"dqmt{os.getpid()}"


def test_the_readme_shows_a_broker_with_metrics_then_a_scrape() -> None:
    blocks = readme_blocks("metrics")
    assert [b.background for b in blocks] == [True, False]
    assert {b.lang for b in blocks} == {"sh"}
    assert "--metrics 127.0.0.1:9404" in blocks[0].code
    assert "127.0.0.1:9404/metrics" in blocks[1].code


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_the_readme_metrics_commands_run(tmp_path: Path) -> None:
    outputs: list[str] = []
    with ReadmeRun(tmp_path, NS) as run:
        for block in readme_blocks("metrics"):
            if block.background:
                run.start_background(block.code)
                continue
            res = run.run(block, timeout=120)
            assert res.returncode == 0, f"{block.code}\nexited {res.returncode}:\n{res.stdout}\n{res.stderr}"
            outputs.append(res.stdout)
    shown = outputs[-1]
    assert 'dmq_topic_messages_in_total{topic="clicks"} 3.0' in shown, shown
    assert 'dmq_requests_total{request="Produce"}' in shown, shown
    assert "serves metrics on http://127.0.0.1:9404/metrics" in (tmp_path / "server.log").read_text()
    assert "Traceback" not in (tmp_path / "server.log").read_text()
