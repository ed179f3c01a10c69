"""DescribeLogDirs (35): the size of each partition's log in this broker's data directory.

As Kafka's (``kafka-log-dirs.sh --describe``, Kafbat UI and AKHQ ask every broker): one
result per log directory (dmq has one, ``log.dirs``) with its absolute path, the
partitions hosted here as leader or follower with their size in bytes and Kafka's
offset lag (``max(high watermark - log end offset, 0)``: 0 for a current log; dmq has no
future logs, so ``is_future_key`` is always false), and from v4 the volume's total and
usable bytes. ``topics`` null asks for every partition; a partition asked for that is
not hosted here is left out, as Kafka does. Versions 1-5 (v0 was removed in Kafka 4.0;
v5 adds ``is_cordoned``, never true here).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    schema = ctx.schema
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            # Partitions are named one by one, as in Kafka: a topic without any asks for none.
            wanted.setdefault(t.topic, set()).update(int(p) for p in t.partitions)
    if not authorize(services, ctx, AclOperation.DESCRIBE):
        # Kafka: DESCRIBE on the cluster; refused, no result (v3+ also says why).
        return make(schema.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    found = services.log_manager.describe(wanted)
    by_topic: dict[str, list[Any]] = {}
    for r in found.replicas:
        by_topic.setdefault(r.topic, []).append(make(
            schema.DescribeLogDirsPartition, partition_index=r.partition, partition_size=r.size,
            offset_lag=r.offset_lag, is_future_key=False))
    result = make(
        schema.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=found.path,
        topics=tuple(make(schema.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                     for name, parts in by_topic.items()),
        total_bytes=found.total_bytes, usable_bytes=found.usable_bytes)
    return make(schema.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results=(result,))
