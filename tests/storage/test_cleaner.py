from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dmq.storage.cleaner as cleaner_module
from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import InvalidRecordError, validate_batches
from dmq.record.control import ControlRecordType, EndTxnMarker, read_end_txn_marker
from dmq.record.records import decode_batch, encode_batch
from dmq.storage.cleaner import DEDUPE_BUFFER_BYTES, MAP_ENTRY_BYTES, CleanPlan, LogCleaner
from dmq.storage.log import Log, now_ms
from dmq.storage.log_manager import LogManager
from dmq.storage.segment import close_deferred
from tests.support.transactions import end_txn, read_committed
from tests.support.transactions import make_log as make_txn_log
from tests.support.transactions import send as txn_send


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
    written[b"k3"] = (put(log, b"k3", None, ts=10_000, codec=codec), None)      # an old timestamp
    written[b"k4"] = (put(log, b"k4", None, ts=1_000_000, codec=codec), None)   # a recent one
    for _ in range(8):  # move everything above out of the active segment
        put(log, b"filler", b"x" * 200, ts=1_000_000)
    before = log.size_in_bytes
    end = log.log_end_offset

    def latest_by_key() -> dict[bytes, list[tuple[int, bytes | None]]]:
        records = everything(log)
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        by_key: dict[bytes, list[tuple[int, bytes | None]]] = {}
        for o, k, v in records:
            assert k is not None
            by_key.setdefault(k, []).append((o, v))
        return by_key

    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=1_000_500)
    assert plan is not None and cleaner.swap(cleaner.clean(plan)) > 0
    assert log.size_in_bytes < before
    assert log.log_end_offset == end
    # Both tombstones stay delete.retention.ms from this pass, whatever their timestamps
    # (KIP-534): before, the one stamped long ago went in the same pass as the value it
    # deletes, and a consumer that had read that value never saw the delete.
    by_key = latest_by_key()
    for key, (offset, value) in written.items():
        assert by_key[key] == [(offset, value)], key
    assert cleaner.tombstone_due[("c", 0)] == 1_001_500
    assert cleaner.plan([log], now=1_001_499) is None  # nothing to do before the horizon
    plan = cleaner.plan([log], now=1_001_500)
    assert plan is not None and cleaner.swap(cleaner.clean(plan)) > 0
    by_key = latest_by_key()
    for key, (offset, value) in written.items():
        if value is None:
            assert key not in by_key  # past the horizon: the tombstones went
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
    put(log, b"pad", b"p" * 500, ts=5000)  # forces a roll: everything above is cleanable
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
    an_hour_ago = time.time() - 3600
    for segment in log.segments[:-1]:
        os.utime(segment.log_path, (an_hour_ago, an_hour_ago))  # written an hour ago
    run_cleaner(log, tmp_path, now=2000)
    assert {k for _, k, _ in everything(log)} == {b"k0", b"k1", b"k2"}
    assert log.segments[0].size == 0  # emptied by the cleaner
    # retention.ms applies as well, in order: a segment the cleaner emptied is as old as
    # its file was before cleaning (Kafka keeps the file's modification time)
    assert log.delete_old_segments(now=now_ms()) > 0
    assert log.log_start_offset > 0


# ---------------------------------------------------------------- transactions


def txn_log(path: Path, **extra: str) -> Log:
    cfg = {"cleanup.policy": "compact", "segment.bytes": "400", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "1000", **extra}
    return make_txn_log(path, **cfg)


def keyed(log: Log, pid: int, epoch: int, seq: int, key: bytes, value: bytes, *,
          transactional: bool = True, ts: int = 1000) -> int:
    return txn_send(log, pid, epoch, seq, [value], keys=[key], transactional=transactional, ts=ts)


def roll_out(log: Log, n: int = 3, size: int = 300) -> None:
    """Plain records (keys of their own) pushing everything written so far out of the active segment."""
    for _ in range(n):
        put(log, b"pad-%d" % log.log_end_offset, b"p" * size, ts=1000)


def cleaner_pass(log: Log, tmp: Path, now: int) -> LogCleaner:
    cleaner = LogCleaner(str(tmp))
    plan = cleaner.plan([log], now=now)
    assert plan is not None
    cleaner.swap(cleaner.clean(plan))
    return cleaner


def control_batches(log: Log) -> list[tuple[int, int, int | None]]:
    """(offset, record count, delete horizon) of every control batch."""
    return [(h.base_offset, h.record_count, h.delete_horizon_ms)
            for _s, _p, h in log.batches_from(log.log_start_offset) if h.is_control]


def test_aborted_records_go_and_never_shadow_committed_ones(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    keyed(log, 1, 0, 0, b"k", b"committed")                   # 0
    end_txn(log, 1, 0, commit=True)                           # 1
    keyed(log, 2, 0, 0, b"k", b"aborted")                     # 2
    keyed(log, 2, 0, 1, b"other", b"aborted too")             # 3
    end_txn(log, 2, 0, commit=False)                          # 4
    roll_out(log)
    before = read_committed(log)
    assert (0, b"committed") in before and all(b"aborted" not in (v or b"") for _, v in before)
    cleaner_pass(log, tmp_path, now=2000)
    offsets = [o for o, _k, _v in everything(log)]
    assert 0 in offsets and 2 not in offsets and 3 not in offsets
    assert read_committed(log) == before
    # The abort marker stays (its records went in this pass) with its index entry.
    assert (4, 1, None) in control_batches(log)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(2, 2)]


def test_markers_get_a_horizon_then_go(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    keyed(log, 1, 0, 0, b"k", b"v1")                          # 0
    end_txn(log, 1, 0, commit=True)                           # 1
    keyed(log, 2, 0, 0, b"k", b"aborted")                     # 2
    end_txn(log, 2, 0, commit=False)                          # 3
    put(log, b"k", b"v2", ts=1000)                            # 4: supersedes the commit's record
    keyed(log, 1, 0, 1, b"x", b"x")                           # 5: later transactions of both
    end_txn(log, 1, 0, commit=True)                           # 6
    keyed(log, 2, 0, 1, b"y", b"y")                           # 7
    end_txn(log, 2, 0, commit=True)                           # 8
    roll_out(log)
    before = read_committed(log)
    later = [(6, 1, None), (8, 1, None)]
    cleaner = cleaner_pass(log, tmp_path, now=2000)
    # Pass 1: the aborted record and the superseded committed one go; both markers stay
    # (batches of their transactions were read in this pass), the abort's index entry too.
    assert control_batches(log) == [(1, 1, None), (3, 1, None), *later]
    assert [h.base_offset for _s, _p, h in log.batches_from(0) if h.base_offset < 5] == [1, 3, 4]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(2, 2)]
    assert cleaner.tombstone_due[("t", 0)] == 2000  # cleanable again at once
    cleaner = cleaner_pass(log, tmp_path, now=2500)
    # Pass 2: their transactions are gone: a delete horizon each, the index entry goes.
    assert control_batches(log) == [(1, 1, 3500), (3, 1, 3500), *later]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert cleaner.tombstone_due[("t", 0)] == 3500
    cleaner_pass(log, tmp_path, now=3499)
    assert control_batches(log) == [(1, 1, 3500), (3, 1, 3500), *later]
    cleaner = cleaner_pass(log, tmp_path, now=3500)
    assert control_batches(log) == later
    assert cleaner.tombstone_due[("t", 0)] == 2**62
    assert read_committed(log) == [r for r in before if r[0] != 0]


def test_marker_with_horizon_keeps_its_record_timestamp(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    keyed(log, 1, 0, 0, b"k", b"v", ts=1000)
    end_txn(log, 1, 0, commit=True, ts=1234)                  # 1
    put(log, b"k", b"newer", ts=1000)
    keyed(log, 1, 0, 1, b"x", b"x", ts=1000)                  # the producer's last batch
    end_txn(log, 1, 0, commit=True)
    roll_out(log)
    cleaner_pass(log, tmp_path, now=2000)
    cleaner_pass(log, tmp_path, now=2000)
    batch = next(seg.read_batch(pos, h) for seg, pos, h in log.batches_from(0) if h.is_control)
    header, records = decode_batch(batch)
    assert header.delete_horizon_ms == 3000 and records[0].timestamp == 1234
    assert read_end_txn_marker(batch) == EndTxnMarker(ControlRecordType.COMMIT, 0)


def test_nothing_at_or_above_the_lso_is_cleaned(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    for i in range(4):
        put(log, b"k", b"old%d" % i, ts=1000)
    roll_out(log, 1)
    keyed(log, 1, 0, 0, b"k", b"open")                        # an open transaction
    for i in range(4):
        put(log, b"k", b"new%d" % i, ts=1000)
    roll_out(log)
    lso = log.last_stable_offset()
    assert lso < log.active_segment.base_offset
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None and plan.end_offset <= lso
    above = [(o, k, v) for o, k, v in everything(log) if o >= plan.end_offset]
    cleaner.swap(cleaner.clean(plan))
    assert [(o, k, v) for o, k, v in everything(log) if o >= plan.end_offset] == above
    # The high watermark holds cleaning back as well.
    log2 = txn_log(tmp_path / "d-0")
    for _ in range(6):
        put(log2, b"k", b"v" * 300, ts=1000)
    log2.update_high_watermark(0)
    assert LogCleaner(str(tmp_path)).plan([log2], now=2000) is None


def test_last_batch_of_an_active_producer_is_kept_empty(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    keyed(log, 7, 0, 0, b"k", b"idempotent", transactional=False)  # 0: the producer's last batch
    put(log, b"k", b"newer", ts=1000)                               # 1
    roll_out(log)
    cleaner_pass(log, tmp_path, now=2000)
    batches = [h for _s, _p, h in log.batches_from(0)]
    assert (batches[0].base_offset, batches[0].record_count, batches[0].producer_id) == (0, 0, 7)
    # Rebuilt from the log, the producer continues its sequence.
    log.close()
    again = Log(log.directory, "t", 0, log.config, clean_shutdown=False)
    assert again.producer_state.producers[7].last_seq == 0
    keyed(again, 7, 0, 1, b"k", b"next", transactional=False)


def test_cleaned_segments_keep_their_index_over_a_restart(tmp_path: Path) -> None:
    log = txn_log(tmp_path / "c-0")
    keyed(log, 2, 0, 0, b"k", b"aborted")
    end_txn(log, 2, 0, commit=False)
    roll_out(log)
    cleaner_pass(log, tmp_path, now=2000)
    entries = log.collect_aborted_transactions(0, log.log_end_offset)
    log.flush()
    log.close()
    again = Log(log.directory, "t", 0, log.config, clean_shutdown=True)
    assert again.collect_aborted_transactions(0, again.log_end_offset) == entries == [(2, 0)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "txn", "commit", "abort"]), st.integers(0, 2),
                          st.integers(0, 3)), min_size=5, max_size=60),
       st.lists(st.integers(0, 3000), min_size=1, max_size=4),
       st.sampled_from([DEDUPE_BUFFER_BYTES, MAP_ENTRY_BYTES + 2, 3 * (MAP_ENTRY_BYTES + 2)]))
def test_property_cleaning_keeps_the_read_committed_view(tmp_path_factory, ops, passes, dedupe) -> None:  # noqa: ANN001
    """Whatever the interleaving, however many passes and however few keys the offset map
    may hold (one, three, or Kafka's default buffer): no aborted record becomes visible,
    and the latest committed value of every key is what a read_committed consumer last sees."""
    tmp = tmp_path_factory.mktemp("txnclean")
    log = txn_log(tmp / "c-0", **{"segment.bytes": "250"})
    seqs = {1: 0, 2: 0, 3: 0}
    open_txn: dict[int, bool] = {}
    for i, (op, p, k) in enumerate(ops):
        pid = p + 1
        key = b"k%d" % k
        if op == "put":
            put(log, key, b"plain-%d" % i, ts=1000)
        elif op == "txn":
            keyed(log, pid, 0, seqs[pid], key, b"txn-%d-%d" % (pid, i))
            seqs[pid] += 1
            open_txn[pid] = True
        elif open_txn.pop(pid, False):
            end_txn(log, pid, 0, commit=op == "commit")
    for pid in list(open_txn):
        end_txn(log, pid, 0, commit=False)
    roll_out(log, size=150)  # (a batch must fit in a 250-byte segment)

    def latest(view: list[tuple[int, bytes | None]]) -> dict[bytes, bytes | None]:
        keys = {o: k for o, k, _v in everything(log)}
        return {keys[o]: v for o, v in view}

    expected = latest(read_committed(log))
    aborted_values = {v for _o, _k, v in everything(log)} - {v for _o, v in read_committed(log)}
    for now in sorted(passes):
        cleaner = LogCleaner(str(tmp), dedupe)
        plan = cleaner.plan([log], now=2000 + now)
        if plan is not None:
            cleaner.swap(cleaner.clean(plan))
        view = read_committed(log)
        assert not aborted_values & {v for _o, v in view}
        assert latest(view) == expected
        assert [o for o, _v in view] == sorted(o for o, _v in view)


def test_a_clean_is_discarded_when_the_log_is_truncated_meanwhile(tmp_path: Path) -> None:
    """A follower truncation while the cleaner thread worked: here it cuts the second
    planned segment and the new leader's records refill it to the very same size. The
    cleaned copy describes the cut records: it must not replace the segment (before, swap
    matched base offset and size only, and brought the cut records back)."""
    log = compacted_log(tmp_path / "c-0")
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"old%02d" % i, ts=1000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None and len(plan.segments) >= 2
    result = cleaner.clean(plan)
    cut = plan.segments[1][0] + 2
    log.truncate_to(cut)
    for i in range(cut, 40):
        put(log, b"k%d" % (i % 4), b"new%02d" % i, ts=1000)
    assert log.segments[1].size == plan.segments[1][2]  # refilled to the planned size
    before = everything(log)
    assert cleaner.swap(result) == 0
    assert everything(log) == before
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith(".cleaned")]


def test_a_clean_of_a_closed_log_closes_no_other_files_descriptor(tmp_path: Path) -> None:
    """The log was closed (its topic deleted, the broker stopping) while the cleaner thread
    worked: swap replaces nothing, and closes nothing (before, it closed the old segment's
    descriptor number again, which by then belonged to another open file)."""
    log = compacted_log(tmp_path / "c-0")
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    result = cleaner.clean(plan)
    log.close()
    others = [os.open(tmp_path / f"other-{i}", os.O_RDWR | os.O_CREAT) for i in range(len(log.segments) * 5)]
    try:
        assert cleaner.swap(result) == 0
        for fd in others:
            os.fstat(fd)  # still open
    finally:
        for fd in others:
            os.close(fd)


def test_a_fetch_slice_of_a_replaced_segment_still_reads_its_bytes(tmp_path: Path) -> None:
    """A fetch answer holds a FileSlice until its connection writes it: the cleaner's swap
    keeps the old file's descriptor open (FD_CLOSE_DELAY_S) so the slice reads what it was
    made from, not another file that took the descriptor's number."""
    log = compacted_log(tmp_path / "c-0")
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    data = log.read(0, 10**6, log.log_end_offset)
    assert data is not None
    expected = data.read()
    assert run_cleaner(log, tmp_path, now=2000) > 0
    others = [os.open(tmp_path / f"other-{i}", os.O_RDWR | os.O_CREAT) for i in range(8)]
    try:
        assert data.read() == expected
    finally:
        for fd in others:
            os.close(fd)
    assert close_deferred(everything=True) > 0


def test_a_damaged_segment_makes_the_log_uncleanable_not_shorter(tmp_path: Path) -> None:
    """Bytes that are not a whole batch inside a planned segment: the pass stops and the log
    is not planned again, as Kafka marks it uncleanable. Before, the cleaned copy simply
    ended at the damage, and every record after it in the segment was gone."""
    log = compacted_log(tmp_path / "c-0")
    put(log, b"a", b"v0", ts=1000)
    put(log, b"a", b"v1", ts=1000)  # the first segment is rewritten: its first record goes
    for i in range(40):
        put(log, b"k%d" % i, b"v%02d" % i, ts=1000)  # and every later one is the latest of its key
    first = log.segments[0]
    third_batch = [pos for _s, pos, _h in log.batches_from(0)][2]
    with open(first.log_path, "r+b") as f:
        f.seek(third_batch + 8)
        f.write(b"\x00\x00\x00\x01")  # a batch length too small to be a batch
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    assert cleaner.run(plan) is None
    assert ("c", 0) in cleaner.uncleanable and cleaner.plan([log], now=2000) is None
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith(".cleaned")]
    assert os.path.getsize(first.log_path) == first.size


def test_a_segment_deleted_before_the_pass_reads_it_is_no_damage(tmp_path: Path) -> None:
    log = compacted_log(tmp_path / "c-0", **{"cleanup.policy": "compact,delete"})
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    log.delete_records_before(log.segments[1].base_offset)  # the first planned segment goes
    assert cleaner.run(plan) is None
    assert not cleaner.uncleanable and cleaner.plan([log], now=2000) is not None


def test_records_that_do_not_parse_make_the_log_uncleanable(tmp_path: Path) -> None:
    log = compacted_log(tmp_path / "c-0")
    for i in range(40):
        put(log, b"k%d" % i, b"v%02d" % i, ts=1000)
    first = log.segments[0]
    with open(first.log_path, "r+b") as f:
        f.seek(61)  # the first record's length varint
        f.write(b"\x7f")
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None and cleaner.run(plan) is None
    assert ("c", 0) in cleaner.uncleanable


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=5, max_size=80),
       st.integers(1, 4))
def test_property_a_small_offset_map_converges_to_one_pass_of_a_large_one(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, bool]], keys_per_map: int) -> None:
    """An offset map of a few keys (log.cleaner.dedupe.buffer.size) cleans in several
    passes, each up to where its map reached; once they are done the log holds what one
    pass with room for every key leaves, and no pass ever loses a key's latest record."""
    logs = []
    for name in ("small", "large"):
        tmp = tmp_path_factory.mktemp(name)
        log = compacted_log(tmp / "c-0", **{"delete.retention.ms": "100000000"})
        for i, (k, tomb) in enumerate(ops):
            put(log, b"k%d" % k, None if tomb else b"v%d" % i, ts=1000)
        for _ in range(4):
            put(log, b"pad-%d" % log.log_end_offset, b"p" * 300, ts=1000)
        logs.append((tmp, log))
    latest = {k: o for o, k, _v in everything(logs[0][1])}
    (small_dir, small), (large_dir, large) = logs
    large_cleaner = LogCleaner(str(large_dir))
    plan = large_cleaner.plan([large], now=2000)
    if plan is not None:
        large_cleaner.swap(large_cleaner.clean(plan))
    small_cleaner = LogCleaner(str(small_dir), keys_per_map * (MAP_ENTRY_BYTES + len(b"k0")))
    reaches = []
    for _ in range(100):
        plan = small_cleaner.plan([small], now=2000)
        if plan is None:
            break
        result = small_cleaner.clean(plan)
        reaches.append(result.end_offset)
        small_cleaner.swap(result)
        held = {k: o for o, k, _v in everything(small)}
        assert all(latest[k] in {o for o, kk, _v in everything(small) if kk == k} for k in held)
    assert reaches == sorted(reaches)
    assert everything(small) == everything(large)


def test_a_pass_holds_one_batch_at_a_time_not_whole_segments(tmp_path: Path) -> None:
    """Segments may be as large as segment.bytes (1 GiB by default): a pass reads and
    writes them a batch at a time. Before, it read each whole segment into memory twice and
    built each cleaned copy in memory."""
    log = compacted_log(tmp_path / "c-0", **{"segment.bytes": str(64 << 20)})
    value = b"v" * 10_000
    for i in range(2_000):  # 20 MB in the first segment
        put(log, b"k%d" % (i % 50), value, ts=1000)
    log.roll()
    put(log, b"k0", b"newest", ts=1000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None and plan.segments[0][2] > 20_000_000
    tracemalloc.start()
    try:
        result = cleaner.clean(plan)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cleaner.swap(result) == 1
    assert len(everything(log)) == 51
    assert peak < 4_000_000, f"a pass over a 20 MB segment held {peak:,} bytes at its peak"


def values_of(log: Log, key: bytes) -> list[bytes | None]:
    return [v for _o, k, v in everything(log) if k == key]


def clean_at(cleaner: LogCleaner, log: Log, now: int) -> None:
    """One pass at ``now``, if the log is due one."""
    plan = cleaner.plan([log], now=now)
    if plan is not None:
        cleaner.swap(cleaner.clean(plan))


def test_a_tombstone_past_the_maps_reach_stays_until_a_map_covers_it(tmp_path: Path) -> None:
    """A pass cleans up to where its map reached and keeps everything after that as it is:
    here a delete past the reach of a two-key map, whose key's value the map never saw.
    Dropping the delete once its horizon passed brought the value back for good."""
    log = compacted_log(tmp_path / "c-0", **{"segment.bytes": "100000"})
    put(log, b"a", b"v0", ts=1000)
    for i in range(1, 10):
        put(log, b"b%d" % i, b"x", ts=1000)
    put(log, b"a", None, ts=1000)  # deletes a; one segment holds it all
    log.roll()
    put(log, b"z", b"z", ts=1000)
    cleaner = LogCleaner(str(tmp_path), 2 * (MAP_ENTRY_BYTES + 2))  # two keys a map
    for now in range(2000, 20000, 1500):  # each pass past the last one's horizon
        clean_at(cleaner, log, now)
        assert values_of(log, b"a") in ([b"v0", None], [None], [])
    assert values_of(log, b"a") == []


def written_and_cleaned(path: Path, cleaner_dir: Path, n: int) -> tuple[Log, LogCleaner]:
    """A compacted log of ``n`` records over four keys, and a cleaner after one pass over it."""
    log = compacted_log(path)
    for i in range(n):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    cleaner = LogCleaner(str(cleaner_dir))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    cleaner.swap(cleaner.clean(plan))
    return log, cleaner


def test_a_truncation_below_the_cleaned_offset_makes_the_log_dirty_from_there(tmp_path: Path) -> None:
    """After a restart (the checkpoint read back) a truncation below the offset the last
    pass reached, and records written anew there: they are deduplicated, as Kafka lowers its
    checkpoint on truncation. Before, they counted as cleaned and a deleted key came back."""
    log, first = written_and_cleaned(tmp_path / "c-0", tmp_path, 40)
    assert first.cleaned_to[("c", 0)] > 12
    cleaner = LogCleaner(str(tmp_path))  # the broker restarted
    log.truncate_to(10)  # an unclean leader election: cut below the cleaned offset
    put(log, b"a", b"old", ts=1000)
    put(log, b"a", None, ts=1000)  # the new leader deleted a
    for i in range(40):
        put(log, b"f%d" % (i % 4), b"f%02d" % i, ts=1000)
    plan = cleaner.plan([log], now=3000)
    assert plan is not None and plan.first_dirty <= 10
    cleaner.swap(cleaner.clean(plan))
    for now in (4500, 6000):
        clean_at(cleaner, log, now)
        assert values_of(log, b"a") in ([b"old", None], [None], [])
    assert values_of(log, b"a") == []


COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "1000"}


def broker_storage(data: Path, topic_id: str, cleaner_first: bool = True) -> tuple[LogManager, LogCleaner]:
    """A LogManager and a LogCleaner wired as the broker wires them (the cleaner before
    load_logs, unless not ``cleaner_first``), the directory's logs loaded as topic
    ``topic_id``'s."""
    lm = LogManager(str(data), lambda _t: LogConfig(BrokerConfig(), COMPACTED))
    cleaner = LogCleaner(str(data), log_manager=lm) if cleaner_first else None
    lm.load_logs(lambda _t, _p: topic_id)
    return lm, cleaner or LogCleaner(str(data), log_manager=lm)


def test_a_truncation_below_the_cleaned_offset_is_in_the_checkpoint_before_a_restart(tmp_path: Path) -> None:
    """A truncation below the offset the last pass reached, records written anew there, then
    a restart before the next pass: the checkpoint read back says no more than the
    truncation offset (Kafka's LogManager.truncateTo writes it at once). Before, the lowered
    offset lived in memory until the next pass, the restart read the old one, the new
    records counted as cleaned and the delete of a went while its value stayed."""
    lm, cleaner = broker_storage(tmp_path, "A")
    log = lm.get_or_create("c", 0, "A")
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    clean_at(cleaner, log, 2000)
    assert cleaner.cleaned_to[("c", 0)] > 12
    log.truncate_to(10)  # an unclean leader election: cut below the cleaned offset
    assert LogCleaner(str(tmp_path)).cleaned_to[("c", 0)] == 10  # written already
    put(log, b"a", b"old", ts=1000)
    put(log, b"a", None, ts=1000)  # the new leader deleted a
    for i in range(40):
        put(log, b"f%d" % (i % 4), b"f%02d" % i, ts=1000)
    lm.shutdown()
    lm, cleaner = broker_storage(tmp_path, "A")  # the broker restarted
    log = lm.logs[("c", 0)]
    plan = cleaner.plan([log], now=3000)
    assert plan is not None and plan.first_dirty <= 10
    cleaner.swap(cleaner.clean(plan))
    for now in (4500, 6000, 7500):
        clean_at(cleaner, log, now)
        assert values_of(log, b"a") in ([b"old", None], [None], [])
    assert values_of(log, b"a") == []
    lm.shutdown()


@pytest.mark.parametrize("cleaner_first", [True, False])
def test_a_log_removed_at_start_leaves_no_checkpoint_entry_to_a_new_log(tmp_path: Path, cleaner_first: bool) -> None:
    """A topic deleted and created again while the broker was down: load_logs removes the
    earlier topic's directory, and its cleaner-offset-checkpoint entry goes with it (Kafka
    removes it on delete and writes the file with held logs only). Before, the new log of
    that name inherited the entry: its first records counted as cleaned, and the delete of
    a went while its value stayed. (Also with a cleaner made after load_logs.)"""
    lm, cleaner = broker_storage(tmp_path, "A")
    old = lm.get_or_create("c", 0, "A")
    for i in range(60):
        put(old, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    clean_at(cleaner, old, 2000)
    assert cleaner.cleaned_to[("c", 0)] > 20
    lm.shutdown()
    lm, cleaner = broker_storage(tmp_path, "B", cleaner_first)  # removes the topic id A directory
    assert ("c", 0) not in cleaner.cleaned_to
    if cleaner_first:
        assert ("c", 0) not in LogCleaner(str(tmp_path)).cleaned_to
    new = lm.get_or_create("c", 0, "B")
    put(new, b"a", b"old", ts=1000)
    put(new, b"a", None, ts=1000)  # key a deleted in the new topic
    for i in range(60):  # past the stale offset before the first pass
        put(new, b"f%d" % (i % 4), b"f%02d" % i, ts=1000)
    for now in (3000, 4500, 6000, 7500):
        clean_at(cleaner, new, now)
        assert values_of(new, b"a") in ([b"old", None], [None], [])
    assert values_of(new, b"a") == []
    lm.shutdown()


def test_the_cleaner_checkpoint_holds_only_the_managers_logs(tmp_path: Path) -> None:
    """An entry of a log the LogManager does not hold (its directory gone some other way) is
    left out of the next write, as Kafka's updateCheckpoints filters the file."""
    lm, cleaner = broker_storage(tmp_path, "A")
    log = lm.get_or_create("c", 0, "A")
    for i in range(60):
        put(log, b"k%d" % (i % 4), b"v%02d" % i, ts=1000)
    cleaner.cleaned_to[("gone", 3)] = 77  # as read from a file naming a log no longer here
    clean_at(cleaner, log, 2000)
    assert set(LogCleaner(str(tmp_path)).cleaned_to) == {("c", 0)}
    lm.delete("c", 0)  # and a deleted log's entry goes at once
    assert LogCleaner(str(tmp_path)).cleaned_to == {}
    lm.shutdown()


def test_a_forgotten_partitions_offset_is_not_inherited_by_a_new_log(tmp_path: Path) -> None:
    """forget() writes the checkpoint, and an offset past a log's end is not trusted: a
    topic deleted and made again (after a restart) starts dirty from its first record."""
    _old, cleaner = written_and_cleaned(tmp_path / "old" / "c-0", tmp_path, 60)
    assert cleaner.cleaned_to[("c", 0)] > 20
    cleaner.forget("c", 0)
    assert ("c", 0) not in LogCleaner(str(tmp_path)).cleaned_to  # the checkpoint says so too
    new = compacted_log(tmp_path / "new" / "c-0")
    for i in range(20):
        put(new, b"n%d" % (i % 2), b"w%02d" % i, ts=1000)
    stale = LogCleaner(str(tmp_path))
    stale.cleaned_to[("c", 0)] = 50  # as an older checkpoint would have it: past the new log's end
    plan = stale.plan([new], now=2000)
    assert plan is not None and plan.first_dirty == 0


def test_a_truncation_or_deletion_under_a_pass_does_not_make_the_log_uncleanable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refilled bytes after a truncation can look like damage to the pass, and a segment
    deleted under it cannot be copied: neither is the log's fault. Before, both marked the
    log uncleanable until the broker restarted."""
    log = compacted_log(tmp_path / "t-0", **{"segment.bytes": "100000"})
    for i in range(40):
        put(log, b"k%d" % (i % 4), b"old%02d" % i, ts=1000)
    log.roll()
    put(log, b"z", b"z", ts=1000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    mapped = LogCleaner._offset_map

    def then_truncated(self: LogCleaner, plan: CleanPlan) -> tuple[dict[bytes, int], int]:
        found = mapped(self, plan)
        log.truncate_to(5)  # this broker became a follower while the pass ran
        for i in range(5, 60):
            put(log, b"k%d" % (i % 4), b"new-longer-value-%02d" % i, ts=1000)
        return found

    monkeypatch.setattr(LogCleaner, "_offset_map", then_truncated)
    assert cleaner.run(plan) is None and not cleaner.uncleanable
    monkeypatch.undo()

    log = compacted_log(tmp_path / "d-0", **{"cleanup.policy": "compact,delete"})
    for i in range(40):
        put(log, b"k%d" % (i % 4) if i > 2 else b"u%d" % i, b"v%02d" % i, ts=1000)
    cleaner = LogCleaner(str(tmp_path / "d"))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    write = cleaner_module._CleanedFile.write

    def after_a_deletion(self: cleaner_module._CleanedFile, data: bytes) -> None:
        if log.log_start_offset == 0:  # retention (or DeleteRecords) takes the segment being cleaned
            log.delete_records_before(log.segments[1].base_offset)
        write(self, data)

    monkeypatch.setattr(cleaner_module._CleanedFile, "write", after_a_deletion)
    assert cleaner.run(plan) is None and not cleaner.uncleanable
    assert not [p for p in (tmp_path / "d-0").iterdir() if p.name.endswith(".cleaned")]


def test_a_crash_right_after_a_segment_is_replaced_leaves_no_old_index_beside_it(tmp_path: Path) -> None:
    """swap() removes the old file's offset and time indexes before the cleaned file takes
    its place: a crash between the two would otherwise leave the old positions beside the
    new file, and an unclean start would read batches from the wrong places."""
    cfg = {"segment.bytes": "100000", "index.interval.bytes": "1000"}
    log = compacted_log(tmp_path / "c-0", **cfg)
    put(log, b"dup", b"1", ts=1000)  # goes in the pass: every later position moves
    for i in range(300):
        put(log, b"k%03d" % i, b"v" * 40, ts=1000)
    put(log, b"dup", b"2", ts=1000)
    log.roll()
    put(log, b"z", b"z", ts=1000)
    log.flush()
    expected = [(o, k, v) for o, k, v in everything(log) if o != 0]
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=2000)
    assert plan is not None
    result = cleaner.clean(plan)

    class Crash(Exception):
        pass

    real = cleaner_module.LogSegment

    def crash(*_args: object, **_kwargs: object) -> None:
        raise Crash  # as a SIGKILL right after the cleaned file replaced the log file

    cleaner_module.LogSegment = crash  # type: ignore[assignment, misc]
    try:
        with pytest.raises(Crash):
            cleaner.swap(result)
    finally:
        cleaner_module.LogSegment = real  # type: ignore[misc]
    again = Log(str(tmp_path / "c-0"), "c", 0, log.config, recovery_point=10**6, clean_shutdown=False)
    for offset in (150, 250, 300):
        sl = again.read(offset, 10**6, again.log_end_offset)
        assert sl is not None
        assert decode_batch(sl.read())[1][0].offset == offset
    assert everything(again) == expected


def test_min_compaction_lag_ms_keeps_young_records_uncompacted(tmp_path: Path) -> None:
    """A dirty segment holding a record younger than min.compaction.lag.ms is not cleaned,
    nor anything after it (Kafka's first uncleanable offset). The config was refused
    (Kafka Streams' versioned stores set it)."""
    log = compacted_log(tmp_path / "c-0", **{"min.compaction.lag.ms": "1000"})
    for rnd in range(4):
        put(log, b"k", b"v%d" % rnd, ts=10_000)
    for _ in range(8):
        put(log, b"filler", b"x" * 200, ts=10_000)
    assert LogCleaner(str(tmp_path)).plan([log], now=10_999) is None
    assert run_cleaner(log, tmp_path, now=11_001) > 0
    assert [v for _, k, v in everything(log) if k == b"k"] == [b"v3"]


def test_max_compaction_lag_ms_cleans_a_log_below_the_dirty_ratio(tmp_path: Path) -> None:
    """A dirty segment whose first batch is older than max.compaction.lag.ms gets cleaned
    even though the log is not dirty enough (Kafka's needCompactionNow)."""
    log = compacted_log(tmp_path / "c-0", **{"min.cleanable.dirty.ratio": "0.99",
                                               "max.compaction.lag.ms": "5000"})
    for i in range(30):
        put(log, b"k%d" % i, b"x" * 100, ts=10_000)
    cleaner = LogCleaner(str(tmp_path))
    plan = cleaner.plan([log], now=10_000)  # the first pass after a start cleans anyway
    assert plan is not None
    cleaner.swap(cleaner.clean(plan))
    for _ in range(6):
        put(log, b"k0", b"y" * 100, ts=12_000)  # a little dirt, from the last pass's reach on
    assert 0 < cleaner.dirty_ratio(log) < 0.99
    assert cleaner.plan([log], now=15_000) is None  # its first batch (10_000): 5 s old
    assert cleaner.plan([log], now=15_001) is not None


def test_a_rebuilt_batch_takes_its_kept_records_largest_timestamp(tmp_path: Path) -> None:
    """A batch the cleaner rebuilds with fewer records gets their largest timestamp as its
    max timestamp (Kafka's MemoryRecords.filterTo). Before, it kept the removed record's,
    and ListOffsets MAX_TIMESTAMP (and time retention) saw a timestamp no record had."""
    log = compacted_log(tmp_path / "c-0", **{"segment.bytes": "100000"})
    data = bytearray(encode_batch([(b"k1", b"a", []), (b"k2", b"b", [])], timestamps=[5000, 1000]))
    log.append_as_leader(data, validate_batches(data, 10**6), 0, timestamp=6000)
    put(log, b"k1", b"c", ts=2000)  # k1's 5000 record goes
    log.roll()
    put(log, b"z", b"z", ts=2000)
    assert log.offset_of_max_timestamp() == (0, 5000)
    clean_at(LogCleaner(str(tmp_path)), log, 7000)
    assert [(o, k) for o, k, _v in everything(log)] == [(1, b"k2"), (2, b"k1"), (3, b"z")]
    assert [h.max_timestamp for _s, _p, h in log.batches_from(0)] == [1000, 2000, 2000]
    assert log.offset_of_max_timestamp() == (2, 2000)
