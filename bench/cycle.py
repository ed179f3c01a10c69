#!/usr/bin/env python3
"""CPU per acks=all record on a replicated partition, all in one process.

One leader (its Listener and ReplicaManager), two followers (their ReplicaManagers
and replica fetchers, fetching from the leader over loopback), a producer sending
one-record acks=all batches with up to --in-flight requests outstanding, and a
consumer long-polling the leader: the whole replicated produce path of three
brokers in one event loop. Prints CPU and wall time per record; run under
``valgrind --tool=callgrind`` for an instruction count that does not depend on
what else the machine is doing.

With ``--gap-ms G`` the producer waits G ms after each answer before sending the
next record, so the process sleeps between records as a broker of a cluster at a
modest rate does; the CPU per record then includes what waking from idle costs
(caches and branch predictors others' work has cooled), which a tight loop hides.
The gaps are not counted in the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import sys
import tempfile
import time
import types
from datetime import timedelta
from typing import Any

import uvloop

from dmq.client.wire import decode_response, encode_request
from dmq.config import BrokerConfig, LogConfig
from dmq.protocol.codec import make, request_class, request_module
from dmq.record.records import encode_batch
from dmq.replication.fetch_session import FetchSessionCache
from dmq.replication.fetcher import ReplicaFetcherManager
from dmq.replication.replica_manager import ReplicaManager
from dmq.server.broker import Broker
from dmq.server.network import Listener
from dmq.storage.log_manager import LogManager

TOPIC = "cycle"


def produce_request(partition: int, batch: bytes) -> Any:
    m = request_module(0, 9)
    return make(request_class(0, 9), transactional_id=None, acks=-1, timeout=timedelta(seconds=30),
                topic_data=(make(m.TopicProduceData, name=TOPIC, partition_data=(
                    make(m.PartitionProduceData, index=partition, records=batch),)),))


def fetch_request(offsets: dict[int, int]) -> Any:
    m = request_module(1, 12)
    return make(request_class(1, 12), cluster_id=None, replica_id=-1,
                max_wait=timedelta(milliseconds=500), min_bytes=1, max_bytes=10 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
                rack_id="", topics=(make(m.FetchTopic, topic=TOPIC, partitions=tuple(
                    make(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                    for p, o in offsets.items())),))


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def replica_manager(base: str, broker_id: int) -> ReplicaManager:
    lm = LogManager(os.path.join(base, f"broker-{broker_id}"), lambda t: LogConfig(BrokerConfig()))
    lm.load_logs(lambda t, p: "id")
    return ReplicaManager(broker_id, lm)


async def run(records: int, partitions: int, in_flight: int, size: int,
              gap_s: float = 0.0) -> dict[str, float]:
    base = tempfile.mkdtemp(prefix="dmq-cycle-")
    leader = replica_manager(base, 1)
    for p in range(partitions):
        leader.become_leader(TOPIC, p, "id", 0, replicas=[1, 2, 3], isr=[1, 2, 3])
    services = types.SimpleNamespace(replica_manager=leader, authorizer=None,
                                     fetch_sessions=FetchSessionCache())
    broker = types.SimpleNamespace(services=services, _sessions={})  # no security state: PLAINTEXT

    async def dispatch(frame: bytes, peer: str, dispatched: Any, connection: int) -> object:
        return await Broker.dispatch(broker, frame, peer, dispatched, connection)  # type: ignore[arg-type]

    try:
        from dmq.handlers import EAGER_API_KEYS
        listener = Listener("127.0.0.1", 0, dispatch, 100 << 20, eager_api_keys=EAGER_API_KEYS)
    except (ImportError, TypeError):  # before eager dispatch
        listener = Listener("127.0.0.1", 0, dispatch, 100 << 20)
    host, port = await listener.start()
    fetchers = []
    for broker_id in (2, 3):
        rm = replica_manager(base, broker_id)
        manager = ReplicaFetcherManager(broker_id, rm, BrokerConfig(), lambda _id: (host, port))
        for p in range(partitions):
            rm.become_follower(TOPIC, p, "id", 1, 0, replicas=[1, 2, 3], isr=[1, 2, 3])
            manager.add_partition((TOPIC, p), 1, 0)
        fetchers.append(manager)
    await asyncio.sleep(0.5)  # followers truncated and fetching

    batch = encode_batch([(None, b"x" * size, [])], timestamp=int(time.time() * 1000))
    requests = [encode_request(produce_request(i % partitions, batch), i + 1, "producer")
                for i in range(records)]
    preader, pwriter = await asyncio.open_connection(host, port)
    creader, cwriter = await asyncio.open_connection(host, port)
    for w in (pwriter, cwriter):
        w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def consume() -> None:
        offsets = dict.fromkeys(range(partitions), 0)
        corr = 0
        fetch_cls = request_class(1, 12)
        while sum(offsets.values()) < records:
            corr += 1
            cwriter.write(encode_request(fetch_request(offsets), corr, "consumer"))
            response = decode_response(fetch_cls, corr, await read_frame(creader))
            for part in response.responses[0].partitions:
                offsets[part.partition_index] = max(offsets[part.partition_index], part.high_watermark)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    consumer = asyncio.ensure_future(consume())
    produce_cls = request_class(0, 9)
    sent = answered = 0
    idle = 0.0
    while answered < records:
        while sent < records and sent - answered < in_flight:
            pwriter.write(requests[sent])
            sent += 1
        response = decode_response(produce_cls, answered + 1, await read_frame(preader))
        assert response.responses[0].partition_responses[0].error_code == 0, response
        answered += 1
        if gap_s:
            t = time.perf_counter()
            await asyncio.sleep(gap_s)
            idle += time.perf_counter() - t
    await asyncio.wait_for(consumer, 30)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0 - idle
    for m in fetchers:
        await m.shutdown()
    await listener.stop()
    return {"records": records, "cpu_us_per_record": round(cpu / records * 1e6, 1),
            "wall_us_per_record": round(wall / records * 1e6, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--in-flight", type=int, default=1)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="idle time after each answered record (0: back to back)")
    args = ap.parse_args()
    result = uvloop.run(run(args.records, args.partitions, args.in_flight, args.size, args.gap_ms / 1000))
    print(json.dumps({**result, "gap_ms": args.gap_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
