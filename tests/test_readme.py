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
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.netns import available as netns_unavailable

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
BLOCK = re.compile(r"<!-- quickstart(: background)? -->\s*\n```(\w+)\n(.*?)\n```", re.DOTALL)
NS = f"dqrm{os.getpid()}"


def quickstart_blocks() -> list[tuple[str, str, bool]]:
    """(language, code, background) of each marked block, in README order."""
    return [(m.group(2), m.group(3), bool(m.group(1))) for m in BLOCK.finditer(README.read_text())]


def test_the_readme_marks_its_quickstart() -> None:
    blocks = quickstart_blocks()
    assert [b[2] for b in blocks].count(True) == 1, "one background block: the broker"
    assert blocks[0][2] and "dmq server" in blocks[0][1]
    assert {lang for lang, _, _ in blocks} == {"sh", "python"}
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


def _netns(*args: str) -> None:
    subprocess.run(["ip", "netns", *args], check=True, capture_output=True)


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_the_quickstart_runs_top_to_bottom(tmp_path: Path) -> None:
    blocks = quickstart_blocks()
    (tmp_path / ".venv").symlink_to(VENV_BIN.parent)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(VENV_BIN.parent), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    env.pop("DMQ_BOOTSTRAP_SERVER", None)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    _netns("add", NS)
    server: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True, capture_output=True)
        prefix = ["ip", "netns", "exec", NS]
        for i, (lang, code, background) in enumerate(blocks):
            where = f"quickstart block {i + 1} ({lang}):\n{code}\n"
            if background:
                log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed with the test
                server = subprocess.Popen([*prefix, "bash", "-euo", "pipefail", "-c", code],
                                          cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
                deadline = time.monotonic() + 60
                while b"listening on" not in (tmp_path / "server.log").read_bytes():
                    assert server.poll() is None, where + (tmp_path / "server.log").read_text()
                    assert time.monotonic() < deadline, where + "no 'listening on' within 60 s"
                    time.sleep(0.2)
                continue
            cmd = ([*prefix, "bash", "-euo", "pipefail", "-c", code] if lang == "sh"
                   else [*prefix, str(VENV_BIN / "python"), "-c", code])
            try:
                res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                                     timeout=180)
            except subprocess.TimeoutExpired as e:
                pytest.fail(f"{where}timed out after 180 s; output so far:\n{e.stdout}\n{e.stderr}")
            assert res.returncode == 0, f"{where}exited {res.returncode}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            assert "Traceback" not in res.stderr, f"{where}printed a traceback:\n{res.stderr[-3000:]}"
            assert not re.search(r"^%\d\|", res.stderr, re.MULTILINE), (
                f"{where}printed raw librdkafka log lines:\n{res.stderr[-3000:]}")
            # an example that shows nothing reads as broken (--partition 0 was empty)
            assert "Processed a total of 0 messages" not in res.stderr, f"{where}a consume printed no record"
        assert (tmp_path / "dmq-data").is_dir(), "the broker keeps its data in ./dmq-data"
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
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
