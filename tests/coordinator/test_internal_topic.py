"""InternalTopic.read, the log a coordinator partition loads from, over a real Log."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import dmq.coordinator.internal_topic as internal_topic
from dmq.config import BrokerConfig, LogConfig
from dmq.coordinator.internal_topic import InternalTopic
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.storage.cleaner import LogCleaner
from dmq.storage.log import Log
from dmq.storage.segment import close_deferred


def test_a_paused_read_goes_on_in_segments_the_cleaner_replaced(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime replays a large partition in slices, and the cleaner may replace its
    segments between two of them (their old files closed): the read goes on from its next
    offset in the cleaned segments, reading each chunk afresh (before, it read on through
    the segments it had listed when it started, whose files were gone)."""
    monkeypatch.setattr(internal_topic, "LOAD_BUFFER_BYTES", 300, raising=False)
    lg = Log(str(tmp_path / "log"), "__consumer_offsets", 0,
             LogConfig(BrokerConfig(), {"cleanup.policy": "compact", "segment.bytes": "600",
                                        "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}),
             clean_shutdown=True)
    for i in range(200):
        data = bytearray(encode_batch([(f"k{i % 10}".encode(), f"v{i}".encode(), [])], timestamp=1000 + i))
        lg.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=1000 + i)
    lg.update_high_watermark(lg.log_end_offset)
    replica_manager: Any = SimpleNamespace(get_partition=lambda name, p: SimpleNamespace(log=lg))
    topic = InternalTopic("__consumer_offsets", replica_manager, SimpleNamespace(), 1, 600)  # type: ignore[arg-type]
    entries = topic.read(0)
    seen = [next(entries) for _ in range(20)]
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([lg], now=10_000)
    assert plan is not None and cleaner.swap(cleaner.clean(plan)) > 0
    close_deferred(everything=True)  # the replaced segments' files are closed
    seen += list(entries)
    offsets = [e.offset for e in seen]
    assert offsets == sorted(set(offsets)) and offsets[:20] == list(range(20))
    latest = {e.key: e.value for e in seen}
    assert latest == {f"k{k}".encode(): f"v{190 + k}".encode() for k in range(10)}
    assert len(seen) < 200  # the rest came from the cleaned segments
    lg.close()


def test_a_read_takes_every_record_and_marker_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(internal_topic, "LOAD_BUFFER_BYTES", 100, raising=False)
    lg = Log(str(tmp_path / "log"), "__consumer_offsets", 0,
             LogConfig(BrokerConfig(), {"cleanup.policy": "compact", "segment.bytes": "1000"}), clean_shutdown=True)
    counter = itertools.count()
    for batch in range(30):
        records = [(f"k{next(counter)}".encode(), b"v", []) for _ in range(batch % 4 + 1)]
        data = bytearray(encode_batch(records, timestamp=1))  # type: ignore[arg-type]
        lg.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=1)
    lg.append_end_txn_marker(7, 0, 3, True, 0)
    replica_manager: Any = SimpleNamespace(get_partition=lambda name, p: SimpleNamespace(log=lg))
    topic = InternalTopic("__consumer_offsets", replica_manager, SimpleNamespace(), 1, 1000)  # type: ignore[arg-type]
    seen = list(topic.read(0))
    assert [e.offset for e in seen] == list(range(lg.log_end_offset))
    assert [e.key for e in seen[:-1]] == [f"k{i}".encode() for i in range(next(counter))]
    assert seen[-1].marker is not None and seen[-1].marker.commit and seen[-1].marker.producer_id == 7
    lg.close()
