"""The README's quickstart, run verbatim, and every repository path it names.

The runnable blocks are the fenced blocks right after a ``<!-- quickstart -->``
comment (``<!-- quickstart: background -->``: a block that keeps running, the
broker, until the test ends). They are extracted from README.md at test time
and run in order, as a user would run them from the checkout: sh blocks with
``bash -euo pipefail`` in a directory holding the checkout's ``.venv`` (so
``. .venv/bin/activate`` works and ``./dmq-data`` lands there), with the
virtualenv's ``bin`` first on PATH as after that activation; python blocks
with the virtualenv's python. Everything runs inside a network namespace the
test creates, so the README's literal ``127.0.0.1:9092`` is free whatever
else runs on this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support.netns import available as netns_unavailable
from support.readme import README, ROOT, Block, ReadmeRun, readme_blocks

NS = f"dqrm{os.getpid()}"


def quickstart_blocks() -> list[Block]:
    """The marked blocks, in README order."""
    return readme_blocks("quickstart")


def test_the_readme_marks_its_quickstart() -> None:
    blocks = quickstart_blocks()
    assert [b.background for b in blocks].count(True) == 1, "one background block: the broker"
    assert blocks[0].background and "dmq server" in blocks[0].code
    assert {b.lang for b in blocks} == {"sh", "python"}
    text = README.read_text()
    assert text.startswith("# dmq\n\n```sh\npython3 -m venv .venv"), "the README starts with its two commands"


def test_root_commands_say_as_root_rather_than_sudo() -> None:
    """Debian run as root, as the README's apt-get lines assume, has no sudo: 'sudo
    .venv/bin/python scripts/chaos.py' was 'command not found' there."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    assert blocks
    with_sudo = [line for block in blocks for line in block.splitlines() if re.match(r"\s*sudo\b", line)]
    assert not with_sudo, with_sudo


def test_every_path_the_readme_names_is_in_the_repository() -> None:
    text = README.read_text()
    named = set(re.findall(r"`((?:bench|docs|scripts|tests|dmq|config|\.ci)/[\w./-]+)`", text))
    named |= set(re.findall(r"\]\(((?:bench|docs|scripts|tests|dmq|config)/[\w./-]+)\)", text))
    named |= set(re.findall(r"--config ((?:config)/[\w./-]+)", text))
    assert named, "the README names files of the repository"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"the README names files the repository does not have: {missing}"
    assert "../shared" not in text


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_the_quickstart_runs_top_to_bottom(tmp_path: Path) -> None:
    with ReadmeRun(tmp_path, NS) as run:
        for i, block in enumerate(quickstart_blocks()):
            where = f"quickstart block {i + 1} ({block.lang}):\n{block.code}\n"
            if block.background:
                run.start_background(block.code)
                continue
            try:
                res = run.run(block, timeout=180)
            except subprocess.TimeoutExpired as e:
                pytest.fail(f"{where}timed out after 180 s; output so far:\n{e.stdout!r}\n{e.stderr!r}")
            assert res.returncode == 0, f"{where}exited {res.returncode}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            assert "Traceback" not in res.stderr, f"{where}printed a traceback:\n{res.stderr[-3000:]}"
            assert not re.search(r"^%\d\|", res.stderr, re.MULTILINE), (
                f"{where}printed raw librdkafka log lines:\n{res.stderr[-3000:]}")
            # an example that shows nothing reads as broken (--partition 0 was empty)
            assert "Processed a total of 0 messages" not in res.stderr, f"{where}a consume printed no record"
        assert (tmp_path / "dmq-data").is_dir(), "the broker keeps its data in ./dmq-data"
    log_text = (tmp_path / "server.log").read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[-3000:]
    # The README's "Data directory" names every kind of file the broker left there.
    listing = re.search(r"## Data directory\s*\n```\n(.*?)```", README.read_text(), re.DOTALL)
    assert listing, "the README shows the data directory"
    names = {re.sub(r"^\d{20}\.", "00000000000000000000.", p.name)
             for p in (tmp_path / "dmq-data").rglob("*") if p.is_file()}
    unnamed = sorted(n for n in names if n.replace("00000000000000000000", "") not in listing.group(1))
    assert not unnamed, f"files of dmq-data the README's listing does not name: {unnamed}"


def test_the_api_table_lists_exactly_what_the_broker_advertises() -> None:
    """ApiVersions advertises the handler registry; the README's table must say the same."""
    from dmq.handlers import supported_apis

    rows = re.findall(r"^\| [A-Za-z]+ \((\d+)\) \| (\d+)(?:–(\d+))? \|", README.read_text(), re.MULTILINE)
    listed = {int(key): (int(low), int(high or low)) for key, low, high in rows}
    assert listed == supported_apis()
