"""Records of the internal ``__transaction_state`` topic (Kafka's formats), sans-io.

Key: int16 version 0, transactional id (int16-length string).

TransactionLogValue v0 (non-flexible): int16 version 0, producer id int64,
producer epoch int16, transaction timeout ms int32, status int8 (Kafka's
TransactionState ids: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence), the
partitions (int32 count, -1 for null, of (topic string, int32 count of int32
partition ids)), last update timestamp int64, start timestamp int64. A null
value is a tombstone: the transactional id expired.

The partition of a transactional id is Kafka's
``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``,
except for a half-message transaction (``__dmq_half/<producer group>/<instance>``,
dmq's extension, docs/half-messages.md): it hashes ``__dmq_half/<producer group>``
so every half-message transaction of one producer group has one coordinator,
which the group's checkers ask for checks.

dmq's check-back record (an extension; Kafka writes no such key): key int16
version 100, transactional id; value int16 version 1, producer id int64,
producer epoch int16, transaction start timestamp int64, checks made int32,
last answer int8 (-1 none, 0 commit, 1 rollback, 2 unknown), last check
timestamp int64, outstanding int8 (1: the last check handed out is not
answered yet), earlier-checks-until timestamp int64 (until then a check of an
earlier transaction of the id may still be answered; -1 none). The producer
id, epoch and start timestamp name the transaction the state belongs to.
Version 0 (without the last two fields) is still read: a check made is taken
as outstanding, and no earlier check as pending. A null value: the check state
is gone (the transactional id expired).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dmq.coordinator.hashing import java_string_hash, kafka_abs

KEY_VERSION = 0
VALUE_VERSION = 0
CHECK_KEY_VERSION = 100
CHECK_VALUE_VERSION = 1
HALF_PREFIX = "__dmq_half/"


class RecordFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int


@dataclass(frozen=True, slots=True)
class CheckValue:
    producer_id: int
    producer_epoch: int
    start_ms: int
    checks: int
    last_answer: int
    last_check_ms: int
    outstanding: bool = False  # the last check handed out is not answered yet
    earlier_until_ms: int = -1  # until then an earlier transaction's check may be answered


def half_group(transactional_id: str) -> str | None:
    """The producer group of a half-message transactional id, else None."""
    if not transactional_id.startswith(HALF_PREFIX):
        return None
    rest = transactional_id[len(HALF_PREFIX):]
    cut = rest.rfind("/")
    return rest[:cut] if cut > 0 else None


def half_transactional_id(group: str, instance: str) -> str:
    if not group or "/" in instance or not instance:
        raise ValueError("a producer group must be non-empty and an instance id must not contain '/'")
    return f"{HALF_PREFIX}{group}/{instance}"


def partition_for(transactional_id: str, partitions: int) -> int:
    group = half_group(transactional_id)
    key = transactional_id if group is None else HALF_PREFIX + group
    return kafka_abs(java_string_hash(key)) % partitions


def _string(v: str) -> bytes:
    data = v.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def encode_check_key(transactional_id: str) -> bytes:
    return struct.pack(">h", CHECK_KEY_VERSION) + _string(transactional_id)


def encode_check_value(v: CheckValue) -> bytes:
    return struct.pack(">hqhqibqbq", CHECK_VALUE_VERSION, v.producer_id, v.producer_epoch, v.start_ms,
                       v.checks, v.last_answer, v.last_check_ms, int(v.outstanding), v.earlier_until_ms)


def encode_value(v: TxnValue) -> bytes:
    out = bytearray(struct.pack(">hqhib", VALUE_VERSION, v.producer_id, v.producer_epoch, v.timeout_ms,
                                v.status))
    out += struct.pack(">i", len(v.partitions))
    for topic, ids in v.partitions:
        out += _string(topic) + struct.pack(">i", len(ids))
        for i in ids:
            out += struct.pack(">i", i)
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise RecordFormatError("truncated __transaction_state record")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return tuple(int(x) for x in values)

    def string(self) -> str:
        (n,) = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("bad string in __transaction_state record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return out.decode()
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"bad string in __transaction_state record: {e}") from None


def decode_key(data: bytes) -> str:
    version, txn_id = decode_any_key(data)
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return txn_id


def decode_any_key(data: bytes) -> tuple[int, str]:
    """(key version, transactional id): 0 for Kafka's record, 100 for dmq's check state."""
    r = _Reader(data)
    (version,) = r.take(">h")
    if version not in (KEY_VERSION, CHECK_KEY_VERSION):
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return version, r.string()


def decode_check_value(data: bytes) -> CheckValue:
    r = _Reader(data)
    (version,) = r.take(">h")
    if version not in (0, CHECK_VALUE_VERSION):
        raise RecordFormatError(f"unsupported check state value version {version}")
    producer_id, epoch, start, checks, answer, last_check = r.take(">qhqibq")
    if version == 0:
        # Whether its last check was answered is not known: taken as not, which makes an
        # answer without the transaction's identity wait rather than be misapplied.
        return CheckValue(producer_id, epoch, start, checks, answer, last_check, checks > 0, -1)
    outstanding, earlier_until = r.take(">bq")
    return CheckValue(producer_id, epoch, start, checks, answer, last_check, outstanding != 0, earlier_until)


def decode_value(data: bytes) -> TxnValue:
    r = _Reader(data)
    (version,) = r.take(">h")
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unsupported __transaction_state value version {version}")
    producer_id, epoch, timeout, status = r.take(">qhib")
    (count,) = r.take(">i")
    partitions = []
    for _ in range(max(count, 0)):
        topic = r.string()
        (n,) = r.take(">i")
        partitions.append((topic, tuple(r.take(">i")[0] for _ in range(max(n, 0)))))
    last_update, start = r.take(">qq")
    return TxnValue(producer_id, epoch, timeout, status, tuple(partitions), last_update, start)
