"""The key indexer's life cycle with its segments: files written for sealed segments
and taken again after a restart (not rebuilt), rebuilt when missing or stale,
deleted with their segment or when the cleaner rewrites it, reset by truncation;
and the work done in slices that never hold the log for long."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.storage import key_indexer
from dmq.storage.cleaner import LogCleaner
from dmq.storage.key_indexer import KeyIndexer
from dmq.storage.log import Log
from tests.support.query import brute_force, index_fully, query_pages

KEYS = [b"k%d" % i for i in range(12)]


def open_log(path: Path, clean: bool = True, **overrides: str) -> Log:
    config = {"segment.bytes": "4000", "index.interval.bytes": "500", **overrides}
    return Log(str(path), "t", 0, LogConfig(BrokerConfig(), config), clean_shutdown=clean)


def fill(log: Log, batches: int, seed: int = 1, ts: int = 1000) -> None:
    rng = random.Random(seed)
    for i in range(batches):
        recs = [(rng.choice(KEYS), b"value-%d" % i, []) for _ in range(rng.randrange(1, 6))]
        data = bytearray(encode_batch(recs, timestamp=ts + i, codec=rng.choice([0, 1, 2, 3, 4])))
        log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=ts + i)


def key_index_files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".keyindex"))


def assert_queries_exact(log: Log) -> None:
    for key in KEYS:
        assert query_pages(log, key)[1] == brute_force(log, key), key


def test_sealed_segments_get_files_that_a_restart_takes_without_rebuilding(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 200)
    indexer = KeyIndexer()
    index_fully(indexer, log)
    sealed = [s.base_offset for s in log.segments[:-1]]
    assert len(sealed) >= 3
    assert key_index_files(tmp_path / "t-0") == [f"{b:020d}.keyindex" for b in sealed]
    assert indexer.files_written == len(sealed)
    assert query_pages(log, b"k3")[2] == 0  # every byte covered: the file or the active runs
    log.flush()
    log.close()

    log = open_log(tmp_path / "t-0")
    indexer = KeyIndexer()
    index_fully(indexer, log)
    assert indexer.files_written == 0
    active_records = log.log_end_offset - log.segments[-1].base_offset
    assert indexer.records_indexed == active_records  # only the active segment is read again
    assert all(s.key_index.file is not None and s.key_index.file.verified for s in log.segments[:-1])
    assert_queries_exact(log)
    log.close()


def test_a_missing_or_stale_file_is_rebuilt_and_an_orphan_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 150)
    index_fully(KeyIndexer(), log)
    files = key_index_files(tmp_path / "t-0")
    log.flush()
    log.close()
    os.unlink(tmp_path / "t-0" / files[0])
    stale = tmp_path / "t-0" / files[1]
    other = (tmp_path / "t-0" / files[2]).read_bytes()
    stale.write_bytes(other)  # a valid file, for another segment
    (tmp_path / "t-0" / f"{10**9:020d}.keyindex").write_bytes(other)  # its segment is gone

    log = open_log(tmp_path / "t-0")
    assert f"{10**9:020d}.keyindex" not in key_index_files(tmp_path / "t-0")
    indexer = KeyIndexer()
    index_fully(indexer, log)
    assert indexer.files_written == 2
    assert key_index_files(tmp_path / "t-0") == files
    assert_queries_exact(log)
    log.close()


def test_a_segment_cut_by_recovery_gets_its_index_rebuilt(tmp_path: Path) -> None:
    """After an unclean shutdown recovery cuts a torn tail (and drops the segments after
    it); the index written for the longer segment no longer matches it: it is deleted,
    the segment indexed again (active now, in memory), and written once sealed."""
    log = open_log(tmp_path / "t-0")
    fill(log, 150)
    index_fully(KeyIndexer(), log)
    victim = log.segments[-2]
    log.close()
    with open(victim.log_path, "r+b") as f:  # the last batch of the segment torn
        f.truncate(os.path.getsize(victim.log_path) - 7)
    log = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "4000",
              "index.interval.bytes": "500"}), clean_shutdown=False, recovery_point=victim.base_offset)
    assert log.segments[-1].base_offset == victim.base_offset
    indexer = KeyIndexer()
    index_fully(indexer, log)
    assert f"{victim.base_offset:020d}.keyindex" not in key_index_files(tmp_path / "t-0")
    assert indexer.records_indexed == log.log_end_offset - victim.base_offset
    assert_queries_exact(log)
    log.roll()
    index_fully(indexer, log)
    assert f"{victim.base_offset:020d}.keyindex" in key_index_files(tmp_path / "t-0")
    assert_queries_exact(log)
    log.close()


def test_retention_truncation_and_the_cleaner_keep_files_in_step(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", **{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    fill(log, 200)
    indexer = KeyIndexer()
    index_fully(indexer, log)
    path = tmp_path / "t-0"
    before = key_index_files(path)

    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=10**12)
    assert plan is not None
    assert cleaner.swap(cleaner.clean(plan)) > 0
    assert len(key_index_files(path)) < len(before)  # the rewritten segments lost theirs
    index_fully(indexer, log)
    assert key_index_files(path) == before
    assert_queries_exact(log)

    log.delete_records_before(log.segments[2].base_offset)
    assert key_index_files(path) == before[2:]
    index_fully(indexer, log)
    assert_queries_exact(log)

    bases = [h.base_offset for s in log.segments[-3:] for _, h in s.batches()]
    cut = bases[len(bases) // 2]
    log.truncate_to(cut)  # a follower diverged
    assert log.segments[-1].key_index.file is None and log.segments[-1].key_index.indexed_position == 0
    fill(log, 40, seed=2, ts=5000)
    assert_queries_exact(log)  # scanned where the index was reset
    index_fully(indexer, log)
    assert_queries_exact(log)
    assert query_pages(log, b"k1")[2] == 0
    log.close()


def test_the_work_comes_in_short_slices(tmp_path: Path) -> None:
    """Even a big backlog is worked through in slices that end at their deadline."""
    log = open_log(tmp_path / "t-0", **{"segment.bytes": "200000"})
    fill(log, 3000)
    indexer = KeyIndexer()
    slices = 0
    longest = 0.0
    while True:
        started = time.monotonic()
        more = indexer.run([log], started + 0.002)
        longest = max(longest, time.monotonic() - started)
        slices += 1
        if not more:
            break
    assert slices > 10
    assert longest < 0.25  # a slice ends after the step that crossed its deadline (the machine is shared)
    assert_queries_exact(log)
    log.close()


def test_an_active_segments_entries_go_to_a_file_past_a_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """However big the active segment grows, its runs stay under MEMORY_ENTRIES: the
    rest is in a file of its first bytes, which a restart takes again."""
    monkeypatch.setattr(key_indexer, "MEMORY_ENTRIES", 100)
    monkeypatch.setattr(key_indexer, "RUN_ENTRIES", 30)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": "10000000"})
    fill(log, 300)
    indexer = KeyIndexer()
    index_fully(indexer, log)
    ki = log.segments[0].key_index
    assert len(log.segments) == 1 and ki.file is not None and 0 < ki.file.log_size <= log.segments[0].size
    assert sum(len(r) for r in ki.runs) < 100 and indexer.files_written >= 2
    assert_queries_exact(log)
    covered = ki.file.log_size
    log.flush()
    log.close()

    log = open_log(tmp_path / "t-0", **{"segment.bytes": "10000000"})
    ki = log.segments[0].key_index
    assert ki.file is not None and ki.file.log_size == covered  # taken again, before any append
    fill(log, 50, seed=3, ts=9000)
    indexer = KeyIndexer()
    index_fully(indexer, log)
    assert indexer.records_indexed < log.log_end_offset  # only what the file did not cover
    assert_queries_exact(log)
    log.close()


def test_a_file_of_first_bytes_that_recovery_cut_into_is_not_taken(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash lost the unflushed end of the active segment after its runs went to a file:
    recovery cuts the log below the file's end, so the file is stale before anything is
    appended again at those offsets, and the records written there later are found."""
    monkeypatch.setattr(key_indexer, "MEMORY_ENTRIES", 100)
    log = open_log(tmp_path / "t-0", **{"segment.bytes": "10000000"})
    fill(log, 300)
    index_fully(KeyIndexer(), log)
    covered = log.segments[0].key_index.file.log_size  # type: ignore[union-attr]
    path = log.segments[0].log_path
    log.close()
    with open(path, "r+b") as f:  # the last 40 % of the bytes the file covers were never written
        f.truncate(int(covered * 0.6))
    log = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "10000000",
              "index.interval.bytes": "500"}), clean_shutdown=False, recovery_point=0)
    assert log.segments[0].key_index.file is None and key_index_files(tmp_path / "t-0") == []
    fill(log, 200, seed=5, ts=7000)  # the same offsets again, other keys
    index_fully(KeyIndexer(), log)
    assert_queries_exact(log)
    log.close()
