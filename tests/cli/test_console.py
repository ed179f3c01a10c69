"""dmq produce / dmq consume as a user drives them: idle cost, lost lines, Ctrl-C at a
terminal, missing topics, bad offsets, closed pipes (issue 10)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.cli import dmq_env, run_dmq


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    for v in values:
        if partition is None:
            p.produce(topic, v)
        else:
            p.produce(topic, v, partition=partition)
        p.poll(0)
    assert p.flush(30) == 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_consume_without_max_messages_prints_everything_then_idles(broker: BrokerProcess, tmp_path: Path) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "con-idle", "-p", "2")
    n = 3000
    _produce(broker.bootstrap, "con-idle", [b"record %d" % i for i in range(n)])
    out = tmp_path / "out"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "dmq", "consume", "con-idle", "--from-beginning"],
                                stdout=f, stderr=subprocess.PIPE, env=dmq_env(broker.bootstrap))
    try:
        deadline = time.monotonic() + 30
        while _lines(out) < n and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert _lines(out) == n, f"printed {_lines(out)} of {n} records"
        time.sleep(1)  # caught up: now it only waits for new records
        before = _cpu_seconds(proc.pid)
        time.sleep(3)
        spent = _cpu_seconds(proc.pid) - before
        assert spent < 0.5, f"an idle dmq consume used {spent:.2f} s of CPU in 3 s"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
        assert proc.stderr is not None
        assert f"Processed a total of {n} messages" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert sorted(out.read_bytes().splitlines()) == sorted(b"record %d" % i for i in range(n))


def test_produce_bad_line_delivers_the_lines_before_it(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "con-badline")
    res = run_dmq(broker.bootstrap, "produce", "con-badline", "--key-separator", ":",
                  stdin=b"k1:one\nk2:two\nthree\nk4:four\n", check=False)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "error: line 3 has no key separator ':'; 2 lines read before it were produced to con-badline"]
    got = run_dmq(broker.bootstrap, "consume", "con-badline", "--from-beginning", "--print-key",
                  "--timeout-ms", "2000").stdout.splitlines()
    assert got == ["k1\tone", "k2\ttwo"]


def _read_until(fd: int, wanted: bytes, seen: bytearray, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {wanted!r} from dmq produce; saw {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other end is closed
                chunk = b""
            assert chunk, f"dmq produce closed the terminal; saw {bytes(seen)!r}"
            seen += chunk


def _read_rest(fd: int, seen: bytearray, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        seen += chunk


def test_produce_at_a_terminal_prompts_and_ctrl_c_delivers(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "con-tty")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dmq", "produce", "con-tty"], stdin=slave,
                            stdout=subprocess.DEVNULL, stderr=slave, env=dmq_env(broker.bootstrap))
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"> ", seen)
        os.write(master, b"first line\n")
        _read_until(master, b"first line\r\n> ", seen)
        os.write(master, b"second line\n")
        _read_until(master, b"second line\r\n> ", seen)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        _read_rest(master, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)
    text = bytes(seen).decode()
    assert "interrupted: 2 lines read before it were produced to con-tty" in text
    assert "still in queue" not in text and "%" not in text
    got = run_dmq(broker.bootstrap, "consume", "con-tty", "--from-beginning",
                  "--timeout-ms", "2000").stdout.splitlines()
    assert got == ["first line", "second line"]


def test_produce_to_a_missing_topic_fails_fast_when_the_broker_does_not_create_topics(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides={"auto.create.topics.enable": "false"}).start()
    try:
        started = time.monotonic()
        res = run_dmq(b.bootstrap, "produce", "con-missing", stdin=b"one\n", check=False, timeout=60)
        assert time.monotonic() - started < 15
        assert res.returncode == 1
        assert res.stderr.splitlines() == [
            "error: topic con-missing does not exist and the broker does not create topics "
            "(auto.create.topics.enable=false); create it with `dmq topics create con-missing`"]
    finally:
        b.close()


def test_consume_offset_out_of_range(broker: BrokerProcess) -> None:
    run_dmq(broker.bootstrap, "topics", "create", "con-orders")
    _produce(broker.bootstrap, "con-orders", [b"order %d" % i for i in range(5)], partition=0)
    try:
        res = run_dmq(broker.bootstrap, "consume", "con-orders", "--partition", "0", "--offset", "100",
                      check=False, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("dmq consume --offset 100 on a 5-record partition hung")
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "error: offset 100 is out of range for con-orders-0: pass an --offset from 0 (earliest) "
        "to 5 (latest)"]
    ok = run_dmq(broker.bootstrap, "consume", "con-orders", "-p", "0", "-o", "3", "-n", "2",
                 timeout=30).stdout.splitlines()
    assert ok == ["order 3", "order 4"]


def test_consume_into_a_closed_pipe_exits_quietly(broker: BrokerProcess) -> None:
    """``dmq consume T | head -1``."""
    run_dmq(broker.bootstrap, "topics", "create", "con-pipe")
    _produce(broker.bootstrap, "con-pipe", [b"%06d" % i + b"." * 200 for i in range(2000)])
    proc = subprocess.Popen([sys.executable, "-m", "dmq", "consume", "con-pipe", "--from-beginning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dmq_env(broker.bootstrap))
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"000000")
        proc.stdout.close()  # head exits: the pipe has no reader
        assert proc.wait(30) == 0
        assert proc.stderr.read().decode() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_produce_names_exactly_the_lines_not_delivered(broker: BrokerProcess) -> None:
    """Lines the broker refuses (here: larger than the topic's max.message.bytes) are named
    by number, the others delivered; the delivery callbacks, not the lines read, decide."""
    run_dmq(broker.bootstrap, "topics", "create", "con-refused", "-p", "1", "-c", "max.message.bytes=300")
    proc = subprocess.Popen([sys.executable, "-m", "dmq", "produce", "con-refused"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dmq_env(broker.bootstrap))
    assert proc.stdin is not None
    watch = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "con-refused-watch",
                      "log_level": 0})

    def stored() -> int:
        return int(watch.get_watermark_offsets(TopicPartition("con-refused", 0), timeout=10)[1])

    big = b"x" * 1000
    # Each group in batches of its own (linger.ms is 5): the next is written once the broker
    # has the small lines before it, or 1.5 s after refused lines.
    try:
        for group, stored_after in (([b"one", b"two", b"three"], 3), ([big, big, big], None),
                                    ([b"seven", b"eight"], 5), ([big], None), ([b"ten"], 6)):
            proc.stdin.write(b"".join(line + b"\n" for line in group))
            proc.stdin.flush()
            if stored_after is None:
                time.sleep(1.5)
                continue
            deadline = time.monotonic() + 30
            while stored() < stored_after:
                assert time.monotonic() < deadline, f"{stored()} records stored, not {stored_after}"
                time.sleep(0.1)
        proc.stdin.close()
        assert proc.wait(90) == 1
    finally:
        watch.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.stderr is not None
    assert proc.stderr.read().decode().splitlines() == [
        "error: 4 of 10 records were not produced to con-refused: lines 4-6, 9 "
        "(Broker: Message size too large)"]
    got = run_dmq(broker.bootstrap, "consume", "con-refused", "--from-beginning",
                  "--timeout-ms", "2000").stdout.splitlines()
    assert got == ["one", "two", "three", "seven", "eight", "ten"]


@pytest.mark.parametrize("acks", ["1", "0"])
def test_produce_with_fewer_acks_delivers(broker: BrokerProcess, acks: str) -> None:
    """--acks 0 and 1 failed with a raw KafkaError while idempotence (which needs acks=all)
    was on by default."""
    topic = f"con-acks-{acks}"
    run_dmq(broker.bootstrap, "topics", "create", topic, "-p", "1")
    res = run_dmq(broker.bootstrap, "produce", topic, "--acks", acks,
                  stdin=b"".join(b"line %d\n" % i for i in range(20)))
    assert res.stderr.splitlines() == [f"produced 20 records to {topic}"]
    got = run_dmq(broker.bootstrap, "consume", topic, "--from-beginning", "-n", "20",
                  "--timeout-ms", "10000").stdout.splitlines()
    assert got == [f"line {i}" for i in range(20)]
    res = run_dmq(broker.bootstrap, "produce", topic, "--acks", acks, "--idempotence", stdin=b"x\n",
                  check=False)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"error: --idempotence needs --acks all (got --acks {acks}): a retried batch is only "
        f"deduplicated when every in-sync replica has it"]


def test_bench_produce_with_idempotence_asks_for_all_acks(broker: BrokerProcess) -> None:
    res = run_dmq(broker.bootstrap, "bench", "produce", "-t", "con-bench-idem", "-n", "1000",
                  "--idempotence")
    assert "produce: con-bench-idem, 100 B records, acks=all" in res.stderr, res.stderr
    assert re.search(r"records sent\s+│\s+1,000\s+│", res.stderr), res.stderr
    assert re.search(r"errors\s+│\s+0\s+│", res.stderr), res.stderr
