"""DelayedDelivery on a leader: due records delivered once, in deliver-time order, never early;
a delivery whose records were cut off after its DELIVERED marker is finished by the next
leader; a record that cannot be read back is named and dropped, not retried forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import BatchHeader, InvalidRecordError, validate_batches
from dmq.record.records import decode_batch, encode_batch
from dmq.replication.delayed import DelayedDelivery
from dmq.replication.partition import Partition
from dmq.replication.replica_manager import ReplicaManager
from dmq.storage.log_manager import LogManager

T0 = 1_795_000_000_000


def leader(path: Path) -> tuple[ReplicaManager, Partition]:
    lm = LogManager(str(path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    rm = ReplicaManager(1, lm)
    return rm, rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])


def produce(p: Partition, values_and_times: list[tuple[bytes, int]], now: int) -> None:
    data = encode_batch([(None, v, [("dmq-deliver-at", str(at).encode())]) for v, at in values_and_times],
                        timestamp=now)
    p.log.append_as_leader(data, validate_batches(data, 1 << 20), 0, timestamp=now)


def visible(p: Partition) -> list[bytes]:
    return [r.value or b"" for seg, pos, h in p.log.batches_from(p.log.log_start_offset) if not h.is_control
            for r in decode_batch(seg.read_batch(pos, h))[1]]


def test_due_records_go_once_in_deliver_time_order_and_never_early(tmp_path: Path) -> None:
    rm, p = leader(tmp_path)
    produce(p, [(b"c", T0 + 300), (b"a", T0 + 100), (b"b", T0 + 200), (b"z", T0 + 5000)], T0)
    delivery = DelayedDelivery(rm)
    assert delivery.tick(T0 + 99) == 0 and visible(p) == []
    assert delivery.tick(T0 + 250) == 2 and visible(p) == [b"a", b"b"]
    assert delivery.tick(T0 + 250) == 0  # not again
    assert delivery.tick(T0 + 4000) == 1 and visible(p) == [b"a", b"b", b"c"]
    assert p.log.delayed.pending == 1


def test_the_next_leader_finishes_a_delivery_cut_after_its_marker(tmp_path: Path) -> None:
    rm, p = leader(tmp_path / "old")
    produce(p, [(b"x", T0 + 10), (b"y", T0 + 20)], T0)
    DelayedDelivery(rm).tick(T0 + 100)
    assert visible(p) == [b"x", b"y"]
    batches = p.log.batches_from(0)
    marker = next(h for _, _, h in batches if h.is_control and h.base_offset > 0)
    everything = p.log.read(0, 1 << 30, p.log.log_end_offset)
    assert everything is not None
    raw = everything.read()

    for cut, expected in ((marker.last_offset + 1, [b"x", b"y"]), (p.log.log_end_offset, [b"x", b"y"])):
        # A follower copied up to ``cut``: with the marker but without the records after it,
        # or with both; then it becomes the leader.
        base = tmp_path / f"follower-{cut}"
        lm = LogManager(str(base), lambda t: LogConfig(BrokerConfig()))
        lm.load_logs(lambda t, q: "id")
        frm = ReplicaManager(2, lm)
        fp = frm.become_follower("t", 0, "id", 1, 0, replicas=[1, 2], isr=[1, 2])[0]
        end = next(pos + h.size for seg, pos, h in p.log.batches_from(0) if h.last_offset + 1 == cut)
        fp.append_as_follower(raw[:end], 0)
        assert fp.log.delayed.pending == 0  # the marker was copied: nothing left to deliver
        frm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[2])
        delivery = DelayedDelivery(frm)
        delivery.tick(T0 + 200)
        assert visible(fp) == expected
        delivery.tick(T0 + 300)  # a new epoch is checked once
        assert visible(fp) == expected


def torn_follower(tmp_path: Path) -> tuple[ReplicaManager, Partition]:
    """A broker that copied a delivery's DELIVERED marker but not its records, and then
    became the leader."""
    rm, p = leader(tmp_path / "old")
    produce(p, [(b"x", T0 + 10), (b"y", T0 + 20)], T0)
    DelayedDelivery(rm).tick(T0 + 100)
    marker = next(h for _, _, h in p.log.batches_from(0) if h.is_control and h.base_offset > 0)
    everything = p.log.read(0, 1 << 30, p.log.log_end_offset)
    assert everything is not None
    end = next(pos + h.size for seg, pos, h in p.log.batches_from(0) if h.last_offset == marker.last_offset)
    lm = LogManager(str(tmp_path / "follower"), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, q: "id")
    frm = ReplicaManager(2, lm)
    fp = frm.become_follower("t", 0, "id", 1, 0, replicas=[1, 2], isr=[1, 2])[0]
    fp.append_as_follower(everything.read()[:end], 0)
    assert fp.log.delayed.pending == 0
    frm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[2])
    return frm, fp


def test_a_torn_delivery_is_finished_although_a_produce_came_before_the_first_tick(tmp_path: Path) -> None:
    """The new leader's first tick found a client's batch, not the marker, at the end of
    its log, and the delayed records (acknowledged to their producer) were never delivered."""
    frm, fp = torn_follower(tmp_path)
    plain = encode_batch([(None, b"p", [])], timestamp=T0 + 150)
    fp.append_records_to_leader(plain, validate_batches(plain, 1 << 20), 1)
    delivery = DelayedDelivery(frm)
    assert delivery.tick(T0 + 200) == 2
    assert visible(fp) == [b"p", b"x", b"y"]
    assert delivery.tick(T0 + 300) == 0 and visible(fp) == [b"p", b"x", b"y"]


def test_a_torn_delivery_whose_finishing_append_fails_is_finished_at_a_later_tick(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    frm, fp = torn_follower(tmp_path)
    delivery = DelayedDelivery(frm)
    append = fp.append_records_to_leader

    def full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fp, "append_records_to_leader", full_disk)
    assert delivery.tick(T0 + 200) == 0 and visible(fp) == []
    monkeypatch.setattr(fp, "append_records_to_leader", append)
    assert delivery.tick(T0 + 300) == 2 and visible(fp) == [b"x", b"y"]
    assert delivery.tick(T0 + 400) == 0 and visible(fp) == [b"x", b"y"]


def test_a_record_that_cannot_be_read_back_is_dropped_with_an_error(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    rm, p = leader(tmp_path)
    produce(p, [(b"gone", T0 + 10)], T0)
    for _ in range(3):
        plain = encode_batch([(None, b"p", [])], timestamp=T0)
        p.log.append_as_leader(plain, validate_batches(plain, 1 << 20), 0, timestamp=T0)
    p.log.roll()
    p.log.delete_records_before(p.log.log_end_offset)  # DeleteRecords past the DELAYED record
    delivery = DelayedDelivery(rm)
    assert delivery.tick(T0 + 100) == 0
    assert p.log.delayed.pending == 0
    assert "cannot be read back" in caplog.text


def test_a_torn_delivery_that_can_never_be_finished_does_not_stop_later_deliveries(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An error that would come back every time (the records no longer pass the topic's
    checks) is logged once; the partition's other delayed records are still delivered."""
    frm, fp = torn_follower(tmp_path)
    produce(fp, [(b"later", T0 + 500)], T0 + 150)
    delivery = DelayedDelivery(frm)
    append = fp.append_records_to_leader

    def refused(data, *args, **kwargs):  # type: ignore[no-untyped-def]
        if b"later" not in bytes(data):
            raise InvalidRecordError("invalid_record", "refused")
        return append(data, *args, **kwargs)

    monkeypatch.setattr(fp, "append_records_to_leader", refused)
    assert delivery.tick(T0 + 200) == 0
    assert delivery.tick(T0 + 600) == 1 and visible(fp) == [b"later"]


def test_a_topic_created_again_under_the_same_name_delivers_its_own_records(tmp_path: Path) -> None:
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, q: "id")
    rm = ReplicaManager(1, lm)
    old = rm.become_leader("t", 0, "id-old", 0, replicas=[1], isr=[1])
    delivery = DelayedDelivery(rm)  # one per broker, as long-lived as it
    produce(old, [(b"old", T0 + 10)], T0)
    assert delivery.tick(T0 + 100) == 1 and visible(old) == [b"old"]
    rm.remove_partition("t", 0, delete=True)  # DeleteTopics
    delivery.tick(T0 + 200)  # ticks go on while the topic is gone
    new = rm.become_leader("t", 0, "id-new", 0, replicas=[1], isr=[1])  # CreateTopics, same epoch 0
    produce(new, [(b"new", T0 + 310)], T0 + 300)
    assert delivery.tick(T0 + 400) == 1
    assert visible(new) == [b"new"]  # not the deleted topic's record, and not lost


def test_a_topic_deleted_and_created_between_two_ticks_delivers_its_own_records(tmp_path: Path) -> None:
    lm = LogManager(str(tmp_path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, q: "id")
    rm = ReplicaManager(1, lm)
    old = rm.become_leader("t", 0, "id-old", 0, replicas=[1], isr=[1])
    delivery = DelayedDelivery(rm)
    produce(old, [(b"old", T0 + 10)], T0)
    assert delivery.tick(T0 + 100) == 1
    rm.remove_partition("t", 0, delete=True)
    new = rm.become_leader("t", 0, "id-new", 0, replicas=[1], isr=[1])
    produce(new, [(b"new", T0 + 310)], T0 + 300)
    assert delivery.tick(T0 + 400) == 1
    assert visible(new) == [b"new"]
    rm.remove_partition("t", 0, delete=True)
    delivery.tick(T0 + 500)
    assert delivery._led == {}  # nothing kept for a partition no longer hosted


def configured_leader(path: Path, **overrides: str) -> tuple[ReplicaManager, Partition]:
    lm = LogManager(str(path), lambda t: LogConfig(BrokerConfig(), overrides))
    lm.load_logs(lambda t, q: "id")
    rm = ReplicaManager(1, lm)
    return rm, rm.become_leader("t", 0, "id", 0, replicas=[1], isr=[1])


def delivered_batches(p: Partition) -> list[tuple[BatchHeader, list[bytes]]]:
    return [(h, [r.value or b"" for r in decode_batch(seg.read_batch(pos, h))[1]])
            for seg, pos, h in p.log.batches_from(p.log.log_start_offset) if not h.is_control]


def test_delivery_batches_keep_to_max_message_bytes(tmp_path: Path) -> None:
    """500 records of 50 KB (one produce request each) due at once: delivered in batches a
    consumer fetching max.message.bytes can take (not one 25 MB batch)."""
    rm, p = leader(tmp_path)
    values = [b"%03d" % i + b"x" * 50_000 for i in range(500)]
    for i, v in enumerate(values):
        produce(p, [(v, T0 + 10 + i)], T0)
    delivery = DelayedDelivery(rm)
    delivered = 0
    for tick in range(10):  # a backlog this large takes a few ticks
        delivered += delivery.tick(T0 + 1000 + tick * 100)
    assert delivered == 500 and p.log.delayed.pending == 0
    batches = delivered_batches(p)
    assert max(h.size for h, _ in batches) <= p.log.config.max_message_bytes
    assert [v for _, vs in batches for v in vs] == values  # once each, in deliver-time order


def test_delivery_batches_are_compressed_with_the_topics_codec(tmp_path: Path) -> None:
    rm, p = configured_leader(tmp_path, **{"compression.type": "gzip"})
    values = [b"%d" % i + b"a" * 2000 for i in range(20)]
    produce(p, [(v, T0 + 10) for v in values], T0)
    assert DelayedDelivery(rm).tick(T0 + 100) == 20
    batches = delivered_batches(p)
    assert [h.compression for h, _ in batches] == [1]  # gzip
    assert batches[0][0].size < 2000  # twenty 2 KB values of one letter, compressed
    assert batches[0][1] == values


@pytest.mark.parametrize("cut_after", range(1, 8))
def test_a_delivery_torn_between_its_batches_is_finished_once(tmp_path: Path, cut_after: int) -> None:
    """A delivery of several batches (each after its own DELIVERED marker): whichever batch a
    follower copied last before it became the leader, every record is delivered once."""
    rm, p = configured_leader(tmp_path / "old", **{"max.message.bytes": "3000"})
    values = [b"%d" % i + b"v" * 1000 for i in range(6)]
    produce(p, [(v, T0 + 10 + i) for i, v in enumerate(values)], T0)
    DelayedDelivery(rm).tick(T0 + 100)
    batches = p.log.batches_from(0)
    # The DELAYED records, then three times a DELIVERED marker and a batch of two records.
    assert [h.is_control for _, _, h in batches] == [True, True, False, True, False, True, False]
    everything = p.log.read(0, 1 << 30, p.log.log_end_offset)
    assert everything is not None
    end = sum(h.size for _, _, h in batches[:cut_after])
    lm = LogManager(str(tmp_path / "follower"), lambda t: LogConfig(BrokerConfig(), {"max.message.bytes": "3000"}))
    lm.load_logs(lambda t, q: "id")
    frm = ReplicaManager(2, lm)
    fp = frm.become_follower("t", 0, "id", 1, 0, replicas=[1, 2], isr=[1, 2])[0]
    fp.append_as_follower(everything.read()[:end], 0)
    frm.become_leader("t", 0, "id", 1, replicas=[1, 2], isr=[2])
    delivery = DelayedDelivery(frm)
    delivery.tick(T0 + 200)
    delivery.tick(T0 + 300)
    assert sorted(visible(fp)) == sorted(values)


def test_a_record_larger_than_max_message_bytes_alone_is_delivered_in_its_own_batch(tmp_path: Path) -> None:
    """It was accepted when produced (max.message.bytes lowered since, or compressed then)."""
    rm, p = configured_leader(tmp_path, **{"max.message.bytes": "1000"})
    values = [b"a", b"b" * 5000, b"c"]
    produce(p, [(v, T0 + 10 + i) for i, v in enumerate(values)], T0)
    assert DelayedDelivery(rm).tick(T0 + 100) == 3
    assert [vs for _, vs in delivered_batches(p)] == [[b"a"], [b"b" * 5000], [b"c"]]
