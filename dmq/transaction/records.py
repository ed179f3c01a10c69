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
``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dmq.coordinator.hashing import java_string_hash

KEY_VERSION = 0
VALUE_VERSION = 0


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


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: Integer.MIN_VALUE is 0, not itself."""
    return 0 if n == -(2**31) else abs(n)


def partition_for(transactional_id: str, partitions: int) -> int:
    return kafka_abs(java_string_hash(transactional_id)) % partitions


def _string(v: str) -> bytes:
    data = v.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


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
    r = _Reader(data)
    (version,) = r.take(">h")
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return r.string()


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
