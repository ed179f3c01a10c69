"""Which record the half-message checker is shown: the first of the producer's transaction
from the offset DescribeProducers gives, read from a partition's batches as a Fetch returns
them, including a record held back for delayed delivery and never another producer's."""

from __future__ import annotations

from pathlib import Path

from dmq.client.transactions import first_record
from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import validate_batches
from dmq.record.records import encode_batch
from dmq.storage.log import Log
from dmq.storage.log_manager import LogManager

NOW = 1_800_000_000_000
TRANSACTIONAL = 0x10


def log(path: Path) -> Log:
    lm = LogManager(str(path), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    return lm.get_or_create("t", 0, "id")


def append(lg: Log, records: list[tuple[bytes, list[tuple[str, bytes | None]]]], producer_id: int = -1,
           sequence: int = -1) -> int:
    data = encode_batch([(k, b"v-" + k, h) for k, h in records], timestamp=NOW, producer_id=producer_id,
                        producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence,
                        attributes_extra=TRANSACTIONAL if producer_id >= 0 else 0)
    start = lg.log_end_offset
    lg.append_as_leader(data, validate_batches(data, 1 << 20), 0, timestamp=NOW)
    return start


def fetched(lg: Log, start: int) -> bytes:
    read = lg.read(start, 1 << 20, lg.log_end_offset)
    assert read is not None
    return bytes(read.read())


DELAY = [("dmq-delay-ms", b"60000"), ("trace", b"t1")]


def test_a_half_message_taken_out_for_delayed_delivery_is_found_not_the_next_producers(tmp_path: Path) -> None:
    lg = log(tmp_path)
    append(lg, [(b"before", [])])
    start = append(lg, [(b"order-42", DELAY)], producer_id=7, sequence=0)
    append(lg, [(b"someone-else", [])])
    assert first_record(fetched(lg, start), start, 7) == (start + 1, b"order-42", b"v-order-42", [("trace", b"t1")])


def test_the_first_record_of_the_batch_at_the_start_when_it_has_one(tmp_path: Path) -> None:
    lg = log(tmp_path)
    start = append(lg, [(b"a", []), (b"b", DELAY)], producer_id=7, sequence=0)
    append(lg, [(b"c", [])], producer_id=7, sequence=2)
    assert first_record(fetched(lg, start), start, 7) == (start, b"a", b"v-a", [])


def test_another_producers_batch_at_the_start_is_not_the_transactions(tmp_path: Path) -> None:
    lg = log(tmp_path)
    start = append(lg, [(b"someone-else", [])])
    append(lg, [(b"late", [])], producer_id=7, sequence=0)
    assert first_record(fetched(lg, start), start, 7) is None
    assert first_record(b"", start, 7) is None
