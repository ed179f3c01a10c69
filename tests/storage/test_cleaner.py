from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import InvalidRecordError, validate_batches
from dmq.record.records import decode_batch, encode_batch
from dmq.storage.cleaner import LogCleaner
from dmq.storage.log import Log


def compacted_log(path: Path, **extra: str) -> Log:
    cfg = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "1000", **extra}
    return Log(str(path), "c", 0, LogConfig(BrokerConfig(), cfg), clean_shutdown=True)


def put(log: Log, key: bytes, value: bytes | None, ts: int, codec: int = 0) -> int:
    data = bytearray(encode_batch([(key, value, [])], timestamp=ts, codec=codec))
    return log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=ts).first_offset


def everything(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for segment, pos, header in log.batches_from(log.log_start_offset):
        _, recs = decode_batch(segment.read_batch(pos, header))
        out += [(r.offset, r.key, r.value) for r in recs]
    return out


def run_cleaner(log: Log, tmp: Path, now: int) -> int:
    cleaner = LogCleaner(str(tmp))
    plan = cleaner.plan([log], now=now)
    assert plan is not None
    return cleaner.swap(cleaner.clean(plan))


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_keeps_latest_value_per_key_and_offsets(tmp_path: Path, codec: int) -> None:
    log = compacted_log(tmp_path / "c-0")
    written: dict[bytes, tuple[int, bytes | None]] = {}
    for rnd in range(6):
        for k in range(8):
            key = b"k%d" % k
            value = b"v%d-%d" % (k, rnd)
            written[key] = (put(log, key, value, ts=10_000 + rnd, codec=codec), value)
    written[b"k3"] = (put(log, b"k3", None, ts=10_000, codec=codec), None)      # old tombstone
    written[b"k4"] = (put(log, b"k4", None, ts=1_000_000, codec=codec), None)   # recent tombstone
    for _ in range(8):  # move everything above out of the active segment
        put(log, b"filler", b"x" * 200, ts=1_000_000)
    before = log.size_in_bytes
    end = log.log_end_offset
    assert run_cleaner(log, tmp_path, now=1_000_500) > 0
    assert log.size_in_bytes < before
    assert log.log_end_offset == end
    records = everything(log)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    by_key: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for o, k, v in records:
        assert k is not None
        by_key.setdefault(k, []).append((o, v))
    for key, (offset, value) in written.items():
        if key == b"k3":
            assert key not in by_key  # its tombstone is older than delete.retention.ms
        else:
            assert by_key[key] == [(offset, value)], key
    # reading still works from any offset, including ones removed by cleaning
    sl = log.read(0, 10**6, log.log_end_offset)
    assert sl is not None and decode_batch(sl.read())[1]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=5, max_size=80))
def test_property_latest_record_of_every_key_survives(tmp_path_factory, ops) -> None:  # noqa: ANN001
    tmp = tmp_path_factory.mktemp("clean")
    log = compacted_log(tmp / "c-0", **{"delete.retention.ms": "100000000"})
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for i, (k, tomb) in enumerate(ops):
        key = b"key-%d" % k
        value = None if tomb else b"value-%d" % i
        latest[key] = (put(log, key, value, ts=1000 + i), value)
    put(log, b"pad", b"p" * 700, ts=5000)  # forces a roll: everything above is cleanable
    put(log, b"pad", b"p", ts=5000)
    if len(log.segments) < 2:
        return
    cleaner = LogCleaner(str(tmp))
    plan = cleaner.plan([log], now=6000)
    if plan is None:
        return
    cleaner.swap(cleaner.clean(plan))
    records = {}
    for o, k, v in everything(log):
        assert k is not None
        records.setdefault(k, []).append((o, v))
    for key, (offset, value) in latest.items():
        assert (offset, value) in records[key]
        assert records[key] == [(offset, value)]


def test_null_keys_are_refused_on_compacted_topics(tmp_path: Path) -> None:
    log = compacted_log(tmp_path / "c-0")
    data = bytearray(encode_batch([(None, b"no key", [])]))
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(data, validate_batches(data, 10**6), 0)
    assert e.value.error == "invalid_record"


def test_clean_segments_survive_restart(tmp_path: Path) -> None:
    log = compacted_log(tmp_path / "c-0")
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"v%d" % i, ts=1000 + i)
    run_cleaner(log, tmp_path, now=2000)
    before = everything(log)
    log.close()
    again = Log(str(tmp_path / "c-0"), "c", 0, log.config, recovery_point=0, clean_shutdown=False)
    assert everything(again) == before


def test_compact_and_delete_policies_together(tmp_path: Path) -> None:
    log = compacted_log(tmp_path / "c-0", **{"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"v%d" % i, ts=1000 + i)
    run_cleaner(log, tmp_path, now=2000)
    assert {k for _, k, _ in everything(log)} == {b"k0", b"k1", b"k2"}
    assert log.delete_old_segments(now=10_000) > 0  # retention.ms applies as well
    assert log.log_start_offset > 0
