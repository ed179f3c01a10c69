from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import InvalidRecordError, validate_batches
from dmq.record.records import decode_batch, encode_batch
from dmq.storage.log import Log, OffsetOutOfRangeError, now_ms
from dmq.storage.segment import close_deferred, close_fds, take_due_closes


def make_log(path: Path, **overrides: str) -> Log:
    return Log(str(path), "t", 0, LogConfig(BrokerConfig(), overrides), clean_shutdown=True)


def append(log: Log, n: int, ts: int = 1000, size: int = 100, **kw: int) -> int:
    data = bytearray(encode_batch([(None, b"x" * size, [])] * n, timestamp=ts, **kw))
    return log.append_as_leader(data, validate_batches(data, 10**7), 0, timestamp=ts).first_offset


def read_offsets(log: Log, start: int, max_bytes: int = 10**9) -> list[int]:
    out = []
    offset = start
    while offset < log.log_end_offset:
        sl = log.read(offset, max_bytes, log.log_end_offset)
        assert sl is not None
        _, recs = decode_batch(sl.read())
        new = [r.offset for r in recs if r.offset >= offset]
        out += new
        offset = new[-1] + 1
    return out


def test_roll_by_size_and_read_across_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "2000"})
    for _ in range(40):
        append(log, 3)
    assert len(log.segments) > 5
    assert sorted(os.listdir(tmp_path / "t-0"))[0] == "00000000000000000000.index"
    assert all(len(f.split(".")[0]) == 20 for f in os.listdir(tmp_path / "t-0") if f.endswith(".log"))
    assert read_offsets(log, 0) == list(range(120))
    assert read_offsets(log, 55)[0] == 55


def test_roll_by_time(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.ms": "10"})
    for value, ts in ((b"a", 10**12), (b"b", 10**12 + 9)):
        data = bytearray(encode_batch([(None, value, [])], timestamp=ts))
        log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=ts)
    assert [s.base_offset for s in log.segments] == [0]
    data = bytearray(encode_batch([(None, b"c", [])], timestamp=10**12 + 10))  # 10 ms after the first
    log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=10**12 + 10)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segment_ms_counts_from_the_first_batchs_timestamp_over_a_restart(tmp_path: Path) -> None:
    """A segment's age for segment.ms is the incoming batch's timestamp less its first
    batch's (Kafka's rollingBasedTimestamp), so a restart does not reset it. Before, it
    counted from when the segment was opened: a log restarted more often than segment.ms
    never rolled by time (nor did max.compaction.lag.ms or retention.ms act on it)."""
    def put(ts: int | None = None) -> None:
        now = now_ms() if ts is None else ts
        data = bytearray(encode_batch([(b"k", b"v", [])], timestamp=now))
        log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=now)
    log = make_log(tmp_path / "t-0", **{"segment.ms": "1000"})
    put(now_ms() - 5000)  # written five seconds ago
    log.close()
    log = make_log(tmp_path / "t-0", **{"segment.ms": "1000"})  # the broker restarted
    put()
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_retention_by_bytes_and_time(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "1000", "retention.bytes": "3000"})
    for i in range(30):
        append(log, 2, ts=1000 + i)
    before = log.size_in_bytes
    deleted = log.delete_old_segments(now=2000)
    assert deleted > 0 and log.size_in_bytes <= 3000 + 1000 and log.size_in_bytes < before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000, log.log_end_offset)
    log2 = make_log(tmp_path / "u-0", **{"segment.bytes": "1000", "retention.ms": "1000"})
    for i in range(20):
        append(log2, 2, ts=10_000 + i * 100)
    log2.delete_old_segments(now=10_000 + 19 * 100 + 500)  # only the newest records are young
    assert log2.log_start_offset > 0
    assert log2.log_end_offset == 40
    log2.delete_old_segments(now=10**9)  # everything expired: the log is empty but keeps offsets
    assert log2.log_start_offset == log2.log_end_offset == 40
    assert append(log2, 1, ts=10**9) == 40


def test_time_retention_keeps_a_young_segment_before_an_expired_active_one(tmp_path: Path) -> None:
    """Records backfilled with old timestamps into the active segment: retention walks the
    segments in order and stops at the first young one, as Kafka's deletableSegments. Before,
    the expired active segment was rolled and then the first segment was deleted in its
    place: the young records went, the expired ones stayed."""
    log = make_log(tmp_path / "t-0", **{"retention.ms": "60000"})
    now = 10**12
    append(log, 3, ts=now)
    log.roll()
    append(log, 2, ts=now - 3_600_000)  # an hour old on arrival
    assert log.delete_old_segments(now=now + 1000) == 0
    assert log.log_start_offset == 0 and read_offsets(log, 0) == list(range(5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_time_retention_deletes_the_expired_segments_up_to_the_first_young_one(
        tmp_path_factory: pytest.TempPathFactory, ages: list[int]) -> None:
    """Each segment's records are ``age`` seconds old, retention.ms is 1500: the segments go
    in order up to the first that has not expired (all of them, the active one rolled away,
    when every one has)."""
    log = make_log(tmp_path_factory.mktemp("ret") / "t-0", **{"retention.ms": "1500"})
    now = 10**12
    bases = []
    for i, age in enumerate(ages):
        if i:
            log.roll()
        bases.append(log.log_end_offset)
        append(log, 1, ts=now - age * 1000)
    expired = [age * 1000 > 1500 for age in ages]
    kept_from = next((i for i, e in enumerate(expired) if not e), len(ages))
    log.delete_old_segments(now=now)
    expected_start = bases[kept_from] if kept_from < len(ages) else len(ages)
    assert log.log_start_offset == expected_start
    assert read_offsets(log, expected_start) == list(range(expected_start, len(ages)))


def test_delete_records_moves_start_and_drops_segments(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "1000"})
    for _ in range(20):
        append(log, 2)
    n = len(log.segments)
    assert log.delete_records_before(25) == 25
    assert len(log.segments) < n
    assert read_offsets(log, 25)[0] == 25
    with pytest.raises(OffsetOutOfRangeError):
        log.read(24, 100, log.log_end_offset)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10_000)), min_size=1, max_size=40),
       st.integers(-100, 10_100))
def test_offset_for_timestamp_matches_brute_force(tmp_path_factory, batches, target) -> None:  # noqa: ANN001
    log = make_log(tmp_path_factory.mktemp("ts") / "t-0", **{"segment.bytes": "600", "index.interval.bytes": "100"})
    all_records = []
    for n, ts in batches:
        timestamps = [ts + i for i in range(n)]
        data = bytearray(encode_batch([(None, b"v", [])] * n, timestamps=timestamps))
        first = log.append_as_leader(data, validate_batches(data, 10**6), 0).first_offset
        all_records += [(first + i, t) for i, t in enumerate(timestamps)]
    expected = next(((o, t) for o, t in all_records if t >= target), None)
    assert log.offset_for_timestamp(target) == expected
    best = max(t for _, t in all_records)
    assert log.offset_of_max_timestamp() == next((o, t) for o, t in all_records if t == best)


def test_unclean_restart_rebuilds_and_truncates(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = make_log(d, **{"segment.bytes": "1500"})
    for i in range(30):
        append(log, 2, producer_id=9, producer_epoch=0, base_sequence=2 * i)
    leo = log.log_end_offset
    log.close()
    # Corrupt an index of an old segment and tear the tail of the active one.
    idx = sorted(p for p in os.listdir(d) if p.endswith(".index"))[1]
    (d / idx).write_bytes(b"garbage")
    active = sorted(p for p in os.listdir(d) if p.endswith(".log"))[-1]
    with open(d / active, "ab") as f:
        f.write(b"\x01" * 20)
    again = Log(str(d), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "1500"}),
                recovery_point=0, clean_shutdown=False)
    assert again.log_end_offset == leo
    assert read_offsets(again, 0) == list(range(leo))
    # producer state replayed from the log: a retry of the last batch is a duplicate
    data = bytearray(encode_batch([(None, b"x" * 100, [])] * 2, producer_id=9, producer_epoch=0, base_sequence=58))
    res = again.append_as_leader(data, validate_batches(data, 10**6), 0)
    assert res.duplicate and res.first_offset == leo - 2
    with pytest.raises(InvalidRecordError):
        data = bytearray(encode_batch([(None, b"x", [])], producer_id=9, producer_epoch=0, base_sequence=70))
        again.append_as_leader(data, validate_batches(data, 10**6), 0)


def test_flush_messages_moves_recovery_point(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"flush.messages": "5"})
    append(log, 3)
    assert log.recovery_point == 0
    append(log, 3)
    assert log.recovery_point == 6


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_leader_append_writes_patched_batches_and_leaves_the_request_bytes_alone(
        tmp_path: Path, timestamp_type: str) -> None:
    """The leader writes each batch as its patched first bytes plus the request's untouched
    rest (no copy of the request): the log holds the assigned offsets and epoch with valid
    CRCs, the request's (immutable) bytes are unchanged, and a request of more batches than
    one pwritev takes is written whole."""
    log = make_log(tmp_path / "t-0", **{"message.timestamp.type": timestamp_type})
    append(log, 5)
    request = b"".join(encode_batch([(b"k%d" % i, b"v" * (i % 50), [])] * (1 + i % 3), timestamp=2000)
                       for i in range(700))
    before = bytes(request)
    result = log.append_as_leader(request, validate_batches(request, 10**7), 7, timestamp=3000)
    assert request == before
    assert result.first_offset == 5
    offsets = read_offsets(log, 0)
    assert offsets == list(range(log.log_end_offset)) and log.log_end_offset == 5 + sum(1 + i % 3 for i in range(700))
    sl = log.read(5, 10**9, log.log_end_offset)
    assert sl is not None
    data = sl.read()
    batches = validate_batches(data, 10**7)  # CRCs checked
    assert {h.partition_leader_epoch for h in batches.headers} == {7}
    assert [h.base_offset for h in batches.headers][:3] == [5, 6, 8]
    stamps = {h.max_timestamp for h in batches.headers}
    assert stamps == ({3000} if timestamp_type == "LogAppendTime" else {2000})


def test_a_corrupt_batch_in_a_flushed_segment_costs_that_segment_its_tail_only(tmp_path: Path) -> None:
    """A flushed segment whose index and data are corrupt (a bit flipped on disk) is cut at
    its first bad batch, and the flushed segments after it are kept, as Kafka's LogLoader
    recovers such a segment alone. They were deleted before, with every acknowledged record
    in them; only unflushed data after a torn batch is untrusted."""
    d = tmp_path / "t-0"
    log = make_log(d, **{"segment.bytes": "1500"})
    for _ in range(30):
        append(log, 2)
    leo = log.log_end_offset
    log.flush()
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    second = log.segments[1]
    last_batch_base = list(second.batches(0))[-1][1].base_offset
    log.close()
    (d / f"{bases[1]:020d}.index").write_bytes(b"garbage")
    with open(d / f"{bases[1]:020d}.log", "r+b") as f:  # a byte of the last batch's payload
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = Log(str(d), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "1500"}),
                recovery_point=leo, clean_shutdown=False)
    assert [s.base_offset for s in again.segments] == bases
    assert again.log_end_offset == leo
    lost = set(range(last_batch_base, bases[2]))
    assert lost and read_offsets(again, 0) == [o for o in range(leo) if o not in lost]
    assert read_offsets(again, last_batch_base) == list(range(bases[2], leo))  # from inside the gap
    again.close()
    # Once cut, the segment loads as it is: a second unclean start keeps everything.
    third = Log(str(d), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "1500"}),
                recovery_point=leo, clean_shutdown=False)
    assert [s.base_offset for s in third.segments] == bases
    assert read_offsets(third, 0) == [o for o in range(leo) if o not in lost]


def test_a_flush_that_a_truncation_overtakes_leaves_the_recovery_point_below_the_cut(tmp_path: Path) -> None:
    """The LogManager flushes rolled segments on a background thread while the event loop
    may truncate the log (a follower that diverged). The flush must not then raise the
    recovery point to where it began: the bytes above the cut are written again later and
    are not fsynced, and an unclean restart would trust them unchecked."""
    log = make_log(tmp_path / "t-0")
    append(log, 10)
    append(log, 10)
    up_to = log.log_end_offset
    segment = log.segments[-1]
    fsync = segment.flush

    def overtaken() -> None:  # the loop truncates while the thread is in the fsync
        log.truncate_to(5)
        fsync()

    segment.flush = overtaken  # type: ignore[method-assign]
    log.flush_segments(up_to)
    assert log.log_end_offset == 5
    assert log.recovery_point <= 5
    segment.flush = fsync  # type: ignore[method-assign]
    append(log, 10)
    log.flush_segments(log.log_end_offset)  # a flush that began after the cut counts
    assert log.recovery_point == log.log_end_offset == 15


@pytest.mark.parametrize(("delay_ms", "due_now"), [("0", True), ("60000", False)])
def test_a_deleted_segment_stays_readable_for_file_delete_delay_ms(tmp_path: Path, delay_ms: str,
                                                                    due_now: bool) -> None:
    """A fetch answer may hold a slice of a segment DeleteRecords or retention then deletes:
    its descriptor stays open file.delete.delay.ms (the config was accepted and unused)."""
    close_deferred(everything=True)
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "1000", "file.delete.delay.ms": delay_ms})
    for _ in range(20):
        append(log, 2)
    held = log.read(0, 10**6, log.log_end_offset)
    assert held is not None
    before = held.read()
    log.delete_records_before(log.segments[2].base_offset)
    assert held.read() == before  # still readable, though unlinked
    due = take_due_closes()
    assert (held.fd in due) is due_now
    close_fds(due)
    close_deferred(everything=True)


def _age_active_segment_then_append(log: Log, age_ms: int) -> None:
    """One record, then another ``age_ms`` after the active segment was created."""
    created = log.active_segment.created_ms
    for now in (created + 1, created + age_ms):
        data = bytearray(encode_batch([(b"k", b"v", [])], timestamp=now))
        log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=now)


def test_segment_jitter_ms_brings_the_roll_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """segment.jitter.ms (Kafka's): each segment rolls up to that much before segment.ms, by
    a random amount drawn when it is created. It was refused as an unknown config."""
    drawn: list[int] = []

    def randrange(stop: int) -> int:
        drawn.append(stop)
        return 5_000
    monkeypatch.setattr("dmq.config.random.randrange", randrange)
    log = make_log(tmp_path / "t-0", **{"segment.ms": "10000", "segment.jitter.ms": "60000"})
    _age_active_segment_then_append(log, 6_000)  # 6 s >= 10 s - 5 s
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert drawn == [10_000, 10_000]  # below min(jitter, segment.ms), for each new segment
    still = make_log(tmp_path / "u-0", **{"segment.ms": "10000"})  # no jitter: no roll yet
    _age_active_segment_then_append(still, 6_000)
    assert [s.base_offset for s in still.segments] == [0]


def test_max_compaction_lag_ms_caps_the_segment_age_of_a_compacted_topic(tmp_path: Path) -> None:
    """The active segment is never cleaned: a compacted topic's segment rolls by
    max.compaction.lag.ms when that is below segment.ms (Kafka's maxSegmentMs)."""
    log = make_log(tmp_path / "t-0", **{"cleanup.policy": "compact", "segment.ms": "10000",
                                         "max.compaction.lag.ms": "2000"})
    _age_active_segment_then_append(log, 2_500)
    assert [s.base_offset for s in log.segments] == [0, 1]
    deleting = make_log(tmp_path / "u-0", **{"segment.ms": "10000", "max.compaction.lag.ms": "2000"})
    _age_active_segment_then_append(deleting, 2_500)
    assert [s.base_offset for s in deleting.segments] == [0]


def test_timestamps_out_of_the_topics_bounds_are_refused(tmp_path: Path) -> None:
    """message.timestamp.before.max.ms / after.max.ms (and the deprecated difference.max.ms
    where they are unset), as Kafka's LogValidator: a CreateTime record further from the
    broker's clock is INVALID_TIMESTAMP, each such record named; the append writes nothing."""
    now = 100_000
    log = make_log(tmp_path / "t-0", **{"message.timestamp.before.max.ms": "1000",
                                         "message.timestamp.after.max.ms": "500"})

    def produce(target: Log, *timestamps: int) -> None:
        data = bytearray(encode_batch([(None, b"v", [])] * len(timestamps), timestamps=list(timestamps)))
        target.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=now)

    produce(log, 99_000)
    produce(log, 100_500)
    with pytest.raises(InvalidRecordError) as refused:
        produce(log, 98_999)
    assert refused.value.error == "invalid_timestamp"
    assert str(refused.value) == "One or more records have been rejected due to invalid timestamp"
    assert refused.value.record_errors == ((0, "Timestamp 98999 of message with offset 0 is out of range. "
                                                "The timestamp should be within [99000, 100500]"),)
    with pytest.raises(InvalidRecordError) as refused:
        produce(log, 99_500, 100_501, 100_000, 10)
    assert [i for i, _ in refused.value.record_errors] == [1, 3]
    assert log.log_end_offset == 2
    legacy = make_log(tmp_path / "u-0", **{"message.timestamp.difference.max.ms": "10"})
    with pytest.raises(InvalidRecordError):
        produce(legacy, now - 11)
    produce(legacy, now + 10)
    appended = make_log(tmp_path / "v-0", **{"message.timestamp.difference.max.ms": "10",
                                              "message.timestamp.type": "LogAppendTime"})
    produce(appended, 5)  # LogAppendTime: the broker's time replaces the producer's


def _segments(d: Path, suffix: str) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(suffix))


def test_an_index_left_by_a_deleted_segment_is_removed_on_load(tmp_path: Path) -> None:
    """A deletion cut short between its unlinks left ``.index``/``.timeindex`` without
    their ``.log``. Kept, a segment rolled at that base later appended after the stale
    entries and a fetch landed mid-batch (Kafka's loadSegmentFiles deletes orphans)."""
    d = tmp_path / "t-0"
    log = make_log(d, **{"segment.bytes": "1000"})
    for _ in range(12):
        append(log, 2)
    log.close()
    last = _segments(d, ".log")[-1]
    stale = {s: (d / (last.name[:-4] + s)).read_bytes() for s in (".index", ".timeindex")}
    last.unlink()  # the deletion got as far as the segment file
    base = int(last.name[:-4])
    again = make_log(d, **{"segment.bytes": "1000"})
    assert not any((d / (last.name[:-4] + s)).exists() for s in stale)
    assert again.log_end_offset == base
    for _ in range(12):  # the log grows back over the same base
        append(again, 2)
    assert read_offsets(again, 0) == list(range(again.log_end_offset))
    for offset in range(base, again.log_end_offset, 3):
        assert read_offsets(again, offset)[0] == offset


def test_a_segment_without_its_indexes_gets_them_rebuilt(tmp_path: Path) -> None:
    """A sealed segment whose ``.index`` and ``.timeindex`` are gone: they are rebuilt on
    load. Before, an empty offset index was taken as sane (every fetch into the segment
    read each header before its offset) and the missing time index lost the segment's
    max timestamp (ListOffsets by time skipped it)."""
    d = tmp_path / "t-0"
    log = make_log(d, **{"segment.bytes": "100000", "index.interval.bytes": "500"})
    for i in range(400):
        append(log, 1, ts=1000 + i)
    for _ in range(5):
        log.roll()
        append(log, 1, ts=2000)
    log.close()
    first = _segments(d, ".log")[0].name[:-4]
    entries = (d / f"{first}.index").stat().st_size
    assert entries > 0
    (d / f"{first}.index").unlink()
    (d / f"{first}.timeindex").unlink()
    for clean in (True, False):
        again = Log(str(d), "t", 0, LogConfig(BrokerConfig(), {"segment.bytes": "100000",
                                                                 "index.interval.bytes": "500"}),
                    recovery_point=10**6, clean_shutdown=clean)
        assert (d / f"{first}.index").stat().st_size == entries
        assert again.segments[0].max_timestamp == 1399
        assert again.offset_for_timestamp(1350) == (350, 1350)
        assert read_offsets(again, 390)[:3] == [390, 391, 392]
        again.close()
        (d / f"{first}.index").unlink()
        (d / f"{first}.timeindex").unlink()


def test_a_batch_past_the_segments_offset_range_is_cut_on_recovery(tmp_path: Path) -> None:
    """The base offset lies outside the CRC: a stale block can hold a batch whose offset
    the indexes' relative offsets cannot hold. Recovery crashed on it (the log, so the
    broker, did not open); now it is torn data (Kafka's ensureOffsetInRange)."""
    d = tmp_path / "t-0"
    log = make_log(d)
    for _ in range(5):
        append(log, 2)
    log.close()
    seg = _segments(d, ".log")[0]
    data = bytearray(seg.read_bytes())
    positions = [0]
    while positions[-1] < len(data):
        positions.append(positions[-1] + 12 + int.from_bytes(data[positions[-1] + 8: positions[-1] + 12], "big"))
    data[positions[-2]: positions[-2] + 8] = (2**32 + 8).to_bytes(8, "big")
    seg.write_bytes(bytes(data))
    again = Log(str(d), "t", 0, LogConfig(BrokerConfig()), recovery_point=0, clean_shutdown=False)
    assert again.log_end_offset == 8
    assert read_offsets(again, 0) == list(range(8))
    append(again, 1)
    assert read_offsets(again, 0) == list(range(9))


def test_keyless_records_on_a_compacted_topic_are_refused_each_by_its_index(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"cleanup.policy": "compact"})
    data = bytearray(encode_batch([(b"k", b"a", []), (None, b"b", []), (None, b"c", [])], timestamp=1000))
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(data, validate_batches(data, 10**7), 0, timestamp=1000)
    assert e.value.error == "invalid_record"
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    assert e.value.record_errors[0][1] == "Compacted topic cannot accept message without key in topic partition t-0"
    assert log.log_end_offset == 0


def test_an_append_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", **{"segment.bytes": "100"})
    data = bytearray(encode_batch([(None, b"x" * 200, [])], timestamp=1000))
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(data, validate_batches(data, 10**7), 0, timestamp=1000)
    assert e.value.error == "record_list_too_large"
    assert log.log_end_offset == 0 and [s.size for s in log.segments] == [0]


def _keyed_batch(key: bytes, base_offset: int) -> bytearray:
    return bytearray(encode_batch([(key, b"v", [])], base_offset=base_offset, timestamp=1000))


def _offsets_of(log: Log) -> list[int]:
    out = []
    for segment, pos, header in log.batches_from(log.log_start_offset):
        out += [r.offset for r in decode_batch(segment.read_batch(pos, header))[1]]
    return out


@pytest.mark.parametrize("gap", [2**31 + 10, 2**32 + 10])
@pytest.mark.parametrize("one_fetch", [False, True])
def test_a_follower_rolls_at_a_batch_past_the_segments_relative_offsets(
        tmp_path: Path, gap: int, one_fetch: bool) -> None:
    """What a new follower copies from a highly compacted leader: batches 2**31 offsets and
    more past the segment's base. The batch goes to a new segment based at its base offset
    (Kafka's canConvertToRelativeOffset, maybeRoll at firstOffset), also when one fetch
    answer spans the gap. Before, it went in the same segment: an unclean restart took it
    for a torn batch and cut it (log end offset 1), and past 2**32 the append raised
    struct.error, the follower stuck."""
    log = make_log(tmp_path / "t-0", **{"index.interval.bytes": "1"})
    batches = [_keyed_batch(b"a", 0), _keyed_batch(b"b", gap), _keyed_batch(b"c", gap + 1)]
    if one_fetch:
        log.append_as_follower(batches[0] + batches[1] + batches[2])
    else:
        for batch in batches:
            log.append_as_follower(batch)
    assert [s.base_offset for s in log.segments] == [0, gap]
    assert log.log_end_offset == gap + 2 and _offsets_of(log) == [0, gap, gap + 1]
    log.close()
    log = Log(str(tmp_path / "t-0"), "t", 0, LogConfig(BrokerConfig(), {"index.interval.bytes": "1"}),
              recovery_point=0, clean_shutdown=False)  # an unclean restart recovers it all
    assert log.log_end_offset == gap + 2 and _offsets_of(log) == [0, gap, gap + 1]


def test_an_empty_active_segment_gives_way_to_one_at_the_far_batch(tmp_path: Path) -> None:
    """A follower that started over at the leader's log start, its first batch 2**31 and
    more past it: the empty segment is replaced by one based at the batch (Kafka's roll
    deletes an empty active segment)."""
    log = make_log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(100)
    log.append_as_follower(_keyed_batch(b"a", 100 + 2**32))
    assert [s.base_offset for s in log.segments] == [100 + 2**32]
    assert log.log_end_offset == 101 + 2**32 and _offsets_of(log) == [100 + 2**32]


def test_a_leader_rolls_before_offsets_past_a_followers_segments_reach(tmp_path: Path) -> None:
    """A follower's segment whose last batch lies nearly 2**31 offsets past its base, then
    this replica leads: its contiguous offsets roll to a new segment before they pass the
    indexes' reach (Kafka's maybeRoll checks every append)."""
    log = make_log(tmp_path / "t-0")
    log.append_as_follower(_keyed_batch(b"a", 0))
    log.append_as_follower(_keyed_batch(b"b", 2**31 - 3))
    append(log, 10)
    assert [s.base_offset for s in log.segments] == [0, 2**31 - 2]
    assert log.log_end_offset == 2**31 + 8
