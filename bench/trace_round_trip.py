#!/usr/bin/env python3
"""Where a single-record acks=all round trip on an RF=3 partition spends its time, hop by hop,
from packet timestamps on the loopback interface (tcpdump).

Starts Debian's ZooKeeper and three ``dmq server --zookeeper`` brokers on loopback, creates
a one-partition RF=3 topic, sends ``--round-trips`` records one at a time (produce, then
flush until acknowledged, as ``latency_sweep.round_trip``) while ``tcpdump -w`` records the
leader's port, then splits each round trip at the leader into:

- produce request in -> fetch response out to each follower (the leader's append and the
  waiting follower fetches it completes);
- fetch response in -> next fetch request out, per follower (the follower's append);
- the last follower fetch in -> produce response out (the high watermark, the answer);
- produce response out -> the next produce request in (the client).

Needs tcpdump (``apt-get install tcpdump``) and root. tcpdump's own CPU slows the round trip
it watches, so compare the hops with each other, not with ``round_trip.py``.

    .venv/bin/python bench/trace_round_trip.py --round-trips 400
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from procs import Processes, bootstrap_of, start_cluster, stop_on_sigterm  # noqa: E402

PACKET = re.compile(r"(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): .*length (\d+)")
HOPS = ("leader: produce in -> fetch response out", "follower: fetch response in -> fetch out",
        "leader: last follower fetch in -> produce response out", "round trip at the leader",
        "client: produce response out -> next produce in")
MIN_PRODUCE = 150  # a produce request carrying the 100-byte record (the followers' fetches are smaller)
MIN_DATA = 100  # a fetch response carrying it


def packets(lines: Iterable[str]) -> list[tuple[float, int, int, int]]:
    """(time, source port, destination port, payload bytes) of each packet with a payload,
    from ``tcpdump -tt -n`` lines."""
    out = []
    for line in lines:
        m = PACKET.match(line)
        if m and int(m.group(4)) > 0:
            out.append((float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def hops(pk: list[tuple[float, int, int, int]], leader: int, producer: set[int],
         followers: set[int]) -> dict[str, list[float]]:
    """Each round trip's hops in microseconds (the names in HOPS); a round trip whose packets
    are not all there (a follower answered by an earlier fetch, a retransmission) is left out."""
    out: dict[str, list[float]] = {h: [] for h in HOPS}
    previous_answer: float | None = None
    i = 0
    while i < len(pk):
        t0, src, dst, size = pk[i]
        i += 1
        if not (dst == leader and src in producer and size > MIN_PRODUCE):
            continue
        sent: dict[int, float] = {}
        fetched: dict[int, float] = {}
        answered = None
        while i < len(pk) and answered is None:
            t, s, d, n = pk[i]
            if s == leader and d in followers and d not in sent and n > MIN_DATA:
                sent[d] = t
            elif d == leader and s in sent and s not in fetched:
                fetched[s] = t
            elif s == leader and d in producer:
                answered = t
            elif d == leader and s in producer and n > MIN_PRODUCE:
                break  # the next produce before this one's answer: not a clean round trip
            i += 1
        if answered is None or len(sent) != len(followers) or len(fetched) != len(followers):
            previous_answer = None
            continue
        for f in followers:
            out[HOPS[0]].append((sent[f] - t0) * 1e6)
            out[HOPS[1]].append((fetched[f] - sent[f]) * 1e6)
        out[HOPS[2]].append((answered - max(fetched.values())) * 1e6)
        out[HOPS[3]].append((answered - t0) * 1e6)
        if previous_answer is not None:
            out[HOPS[4]].append((t0 - previous_answer) * 1e6)
        previous_answer = answered
    return out


def connections_to(port: int) -> dict[int, int]:
    """Local port -> pid of every TCP connection to ``port`` (from ``ss``)."""
    text = subprocess.run(["ss", "-tnpH", f"dport = :{port}"], capture_output=True, text=True,
                          check=True).stdout
    found = {}
    for line in text.splitlines():
        m = re.search(rf"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:{port}\b.*pid=(\d+)", line)
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round-trips", type=int, default=400)
    args = ap.parse_args()
    if shutil.which("tcpdump") is None:
        print("error: tcpdump is not installed; apt-get install tcpdump", file=sys.stderr)
        return 1
    stop_on_sigterm()
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix="dmq-trace-rt-"))
    procs = Processes()
    took: list[float] = []
    try:
        brokers = start_cluster(procs, work, [])
        bootstrap = bootstrap_of(list(brokers.values()))
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("rt", 1, 3)])["rt"].result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the followers join the ISR
            part = admin.list_topics("rt", timeout=10).topics["rt"].partitions[0]
            if len(part.isrs) == 3:
                break
            time.sleep(0.2)
        leader_port = brokers[part.leader].port
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0,
                             "socket.nagle.disable": True})
        for _ in range(50):  # warm up: metadata, connections, the followers' fetch sessions
            producer.produce("rt", b"w")
            producer.flush(10)
        conns = connections_to(leader_port)
        mine = {port for port, pid in conns.items() if pid == os.getpid()}
        followers = {port for port, pid in conns.items() if pid != os.getpid()}
        pcap = work / "rt.pcap"
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-B", "16384", "-s", "96", "-w", str(pcap),
                                 f"tcp port {leader_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(1.0)  # tcpdump attaches
        for _ in range(args.round_trips):
            start = time.perf_counter()
            producer.produce("rt", b"x" * 100)
            producer.flush(10)
            took.append((time.perf_counter() - start) * 1e3)
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        _, err = dump.communicate(timeout=30)
        print("tcpdump: " + ", ".join(err.strip().splitlines()[-3:]))
        text = subprocess.run(["tcpdump", "-r", str(pcap), "-tt", "-n"], capture_output=True, text=True,
                              check=True).stdout
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    found = hops(packets(text.splitlines()), leader_port, mine, followers)
    traced = len(found[HOPS[3]])
    print(f"round trips: {len(took)}, p50 {statistics.median(took):.3f} ms measured by the client; "
          f"{traced} traced whole")
    if not traced:
        print("error: no round trip was traced whole", file=sys.stderr)
        return 1
    width = max(len(h) for h in HOPS)
    print(f"{'hop':{width}}  {'p50 µs':>8}  {'p90 µs':>8}")
    for h in HOPS:
        v = sorted(found[h])
        if v:
            print(f"{h:{width}}  {statistics.median(v):8.0f}  {v[int(len(v) * 0.9)]:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
