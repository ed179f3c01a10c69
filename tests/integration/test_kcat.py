"""Debian's kcat (librdkafka 2.0.2) against a real dmq server."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support.broker import BrokerProcess

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def kcat(*args: str, stdin: bytes | None = None) -> str:
    res = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=60, check=True)
    return res.stdout.decode()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    lines = [f"key{i}:value {i}" for i in range(100)]
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, "-K:", "-z", codec,
         "-H", "source=kcat", stdin="\n".join(lines).encode() + b"\n")
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q",
               "-f", "%o|%k|%s|%h\n")
    rows = out.strip().splitlines()
    assert rows == [f"{i}|key{i}|value {i}|source=kcat" for i in range(100)]


def test_metadata_listing(broker: BrokerProcess, topic_name: str) -> None:
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, stdin=b"x\n")
    out = kcat("-L", "-b", broker.bootstrap, "-t", topic_name)
    assert f'topic "{topic_name}" with 1 partitions' in out
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in out


def test_consume_from_offset_and_tail(broker: BrokerProcess, topic_name: str) -> None:
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, stdin=b"\n".join(b"m%d" % i for i in range(20)) + b"\n")
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-o", "15", "-e", "-q")
    assert out.split() == [f"m{i}" for i in range(15, 20)]
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-o", "-3", "-e", "-q")
    assert out.split() == ["m17", "m18", "m19"]
