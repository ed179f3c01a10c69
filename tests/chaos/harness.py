"""A seeded fault-injection run against a real cluster in network namespaces (Jepsen-style).

One run: ZooKeeper, N brokers and a client host, each in its own namespace,
joined by veth links (support.netns); a topic (default 6 partitions, RF=3,
min.insync.replicas=2, unclean election off); idempotent acks=all producers
writing unique values and a consumer group committing as it goes, all inside
the client namespace (chaos.workload). A schedule derived from the seed
alone (so a run can be replayed) injects faults, some overlapping: SIGKILL of
a leader, a follower, the controller, two brokers at once; SIGSTOP past the
session timeout; SIGTERM; ZooKeeper restarts; a broker cut off from
ZooKeeper only, from its peers and the clients only, or from both. Then
everything heals and the checks run:

- every acknowledged record is at its acknowledged offset, or in its partition
  when the client acknowledged it without one (lost);
- no value twice (duplicates), each producer's values in order per partition;
- every partition, ``__consumer_offsets`` too, led with its full ISR within
  ``recovery_bound_s`` of healing;
- no committed offset above its partition's high watermark;
- after a clean shutdown, all replicas byte-identical below the high watermark;
- no broker exited unless a fault made it, no traceback in a broker log.

With ``ChaosConfig.transactions`` > 0, transactional producers (chaos.workload
txn-produce) also write transactions of a few records to their own topic, and
once they stopped: the last stable offset of each partition reaches its high
watermark (no transaction left hanging); a read_committed consumer reads every
record of each committed transaction exactly once, none of an aborted one, all
or none of one whose commit had an unknown outcome, and each producer's
transactions in order per partition; ``__transaction_state`` and the
transactions' topic are among the replicas compared.

``ChaosRun.run()`` returns a Report; ``Report.failures()`` lists what broke.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from support.broker import BrokerProcess
from support.netns import Network, process_prefix
from support.zookeeper import ZooKeeperProcess

from dmq.record.records import decode_batch
from dmq.transaction.records import partition_for

TESTS_DIR = Path(__file__).resolve().parent.parent
FAULT_KINDS = ["kill_leader", "kill_follower", "kill_controller", "kill_two", "pause", "term",
               "zk_restart", "cut_zk", "cut_peers", "cut_all"]
TOPIC = "chaos"
TXN_TOPIC = "chaos_txn"  # the transactional producers' topic (its directories do not match "chaos-*")
GROUP = "chaos-group"
OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
TXN_STATE_PARTITIONS = 6
TXN_ABORT_INTERVAL_MS = 5000  # the coordinator's sweep for transactions open past their timeout
TXN_VALUE = re.compile(r"(\d+)-t(\d+)-(\d+)")


@dataclass
class Fault:
    at: float  # seconds after the workload started
    kind: str
    duration: float
    target: str = ""  # filled in when it runs: which broker(s)
    leader_of: int | None = None  # aim at the leader of this partition of the topic (scripted runs)
    # Scripted runs: wait for transactional producer K to commit a transaction, then start
    # the fault at once (kill_leader with leader_of of __transaction_state: its coordinator).
    after_commit_of: int | None = None
    topic: str = TOPIC  # the topic of leader_of

    def describe(self) -> str:
        return f"{self.at:6.1f}s {self.kind:<15} {self.duration:5.1f}s {self.target}"


def make_schedule(seed: int, duration_s: float, session_timeout_s: float,
                  max_zk_outage_s: float) -> list[Fault]:
    """Faults from the seed alone: the first ones cover every kind once (shuffled), the
    rest are drawn at random; about a third start before the previous one ended."""
    rng = random.Random(seed)
    kinds = FAULT_KINDS[:]
    rng.shuffle(kinds)
    faults: list[Fault] = []
    t = 5.0
    while t < duration_s:
        kind = kinds.pop() if kinds else rng.choice(FAULT_KINDS)
        if kind == "pause":
            dur = session_timeout_s + rng.uniform(1.0, 3.0)
        elif kind == "zk_restart":
            dur = rng.uniform(1.0, max_zk_outage_s)
        elif kind.startswith("cut"):
            dur = rng.uniform(2.0, 2.5 * session_timeout_s)
        else:
            dur = rng.uniform(1.0, 6.0)  # until the broker is started again
        faults.append(Fault(round(t, 2), kind, round(dur, 2)))
        overlap = rng.random() < 0.33
        t += rng.uniform(1.0, 3.0) if overlap else dur + rng.uniform(3.0, 6.0)
    return faults


@dataclass
class ChaosConfig:
    seed: int
    duration_s: float = 120.0
    brokers: int = 3
    partitions: int = 6
    producers: int = 3
    rate: float = 150.0  # records/s per producer
    session_timeout_ms: int = 4000
    max_zk_outage_s: float = 15.0
    recovery_bound_s: float = 10.0
    check_availability: bool = True  # fail on a write gap beyond 2 x session timeout + 5 s
    base: Path = Path("/tmp/dmq-chaos")
    transactions: int = 0  # transactional producers (chaos.workload txn-produce) on TXN_TOPIC
    txn_rate: float = 5.0  # transactions/s per transactional producer
    txn_size: int = 4  # records per transaction, over consecutive partitions
    txn_timeout_ms: int = 20_000


@dataclass
class Report:
    seed: int
    faults: list[str] = field(default_factory=list)
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    producer_errors: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: int = 0
    duplicate_examples: list[str] = field(default_factory=list)
    # Where each duplicated value sits on every broker's disk: offset, leader epoch and the
    # batch's producer id / epoch / sequences, so a duplicate can be traced to its cause.
    duplicate_batches: list[str] = field(default_factory=list)
    duplicates_after_epoch_bump: int = 0  # copies under different producer ids/epochs
    duplicates_same_producer: int = 0  # copies under one producer id and epoch: a broker bug
    # Producer epochs the clients moved to (KIP-360): librdkafka bumps an idempotent producer's
    # epoch itself, so they are counted from the batches on disk (identities per producer id
    # beyond the first), plus InitProducerId requests that asked the broker for one.
    epoch_bumps: int = 0
    produce_rejections: dict[str, int] = field(default_factory=dict)
    reordered: list[str] = field(default_factory=list)
    recovery_s: float = -1.0
    unrecovered: list[str] = field(default_factory=list)
    committed_above_hw: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    max_ack_gap_s: float = 0.0
    max_ack_gap_where: str = ""
    # The longest time a partition had no acknowledged write while ZooKeeper and a
    # majority of its replicas were up (running, not paused, reachable by peers and clients).
    max_gap_with_majority_s: float = 0.0
    max_gap_with_majority_where: str = ""
    gap_bound_s: float = 0.0
    consumed: int = 0
    records_read: int = 0
    replicas_compared: int = 0
    wall_s: float = 0.0
    recovery_bound_s: float = 10.0
    # Transactional producers (ChaosConfig.transactions): outcomes as the clients saw them,
    # then what a read_committed consumer read after the run.
    txn_committed: int = 0
    txn_aborted: int = 0
    txn_unknown: int = 0  # commit raised an error that leaves the outcome open
    txn_unknown_committed: int = 0  # of those, all records visible
    txn_unknown_aborted: int = 0  # none visible
    txn_producers_created: int = 0  # init_transactions that succeeded (one per producer, plus restarts)
    txn_records_read: int = 0
    txn_lost: list[str] = field(default_factory=list)  # committed, not read
    txn_duplicates: list[str] = field(default_factory=list)
    txn_aborted_visible: list[str] = field(default_factory=list)
    txn_partial: list[str] = field(default_factory=list)  # an unknown transaction half visible
    txn_unexplained: list[str] = field(default_factory=list)  # read, but of no transaction a client ran
    txn_reordered: list[str] = field(default_factory=list)
    txn_unclean: list[str] = field(default_factory=list)  # producers that did not end cleanly
    # The longest time a transactional producer went without ending a transaction (reported,
    # not checked: a stuck coordinator or marker shows here first).
    max_txn_gap_s: float = 0.0
    max_txn_gap_where: str = ""
    lso_wait_s: float = -1.0  # after the producers stopped, until LSO = high watermark everywhere
    lso_bound_s: float = 0.0
    lso_stuck: list[str] = field(default_factory=list)

    def epoch_bump_duplicate_allowance(self) -> int:
        """Duplicates a client may cause by bumping its epoch: the issue's bound is fewer than
        1 per 100,000 acknowledged over the long runs (scripts/chaos.py checks the total);
        a single run, far shorter than 100,000 records, may show one."""
        return max(1, self.acknowledged // 100_000)

    def failures(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} acknowledged records lost, e.g. {self.lost[:5]}")
        untraced = self.duplicates - self.duplicates_after_epoch_bump - self.duplicates_same_producer
        if untraced:
            out.append(f"{untraced} duplicates not traced to their batches, e.g. {self.duplicate_examples[:5]}")
        if self.duplicates_same_producer:
            out.append(f"{self.duplicates_same_producer} duplicates under one producer id and "
                       f"epoch (not deduplicated by the broker), e.g. {self.duplicate_examples[:5]}")
        if self.duplicates_after_epoch_bump > self.epoch_bump_duplicate_allowance():
            out.append(f"{self.duplicates_after_epoch_bump} duplicates re-sent by producers after an "
                       f"epoch bump (allowed {self.epoch_bump_duplicate_allowance()}: under 1 per "
                       f"100,000 acknowledged, one per run), e.g. {self.duplicate_examples[:5]}")
        if self.reordered:
            out.append(f"reordered: {self.reordered[:5]}")
        if self.unrecovered or not 0 <= self.recovery_s <= self.recovery_bound_s:
            out.append(f"not every partition led with a full ISR within {self.recovery_bound_s}s "
                       f"of healing (took {self.recovery_s:.1f}s): {self.unrecovered[:5]}")
        if self.committed_above_hw:
            out.append(f"committed offsets above the high watermark: {self.committed_above_hw}")
        if self.divergent:
            out.append(f"divergent replicas: {self.divergent[:5]}")
        if self.crashes:
            out.append(f"brokers crashed: {self.crashes}")
        if self.tracebacks:
            out.append(f"tracebacks in broker logs: {self.tracebacks[:3]}")
        if self.txn_lost:
            out.append(f"{len(self.txn_lost)} records of committed transactions not read "
                       f"(read_committed), e.g. {self.txn_lost[:5]}")
        if self.txn_duplicates:
            out.append(f"records of transactions read twice: {self.txn_duplicates[:5]}")
        if self.txn_aborted_visible:
            out.append(f"{len(self.txn_aborted_visible)} records of aborted transactions read "
                       f"(read_committed), e.g. {self.txn_aborted_visible[:5]}")
        if self.txn_partial:
            out.append(f"transactions partly visible: {self.txn_partial[:5]}")
        if self.txn_unexplained:
            out.append(f"records of no transaction a producer ran: {self.txn_unexplained[:5]}")
        if self.txn_reordered:
            out.append(f"transactions reordered: {self.txn_reordered[:5]}")
        if self.txn_unclean:
            out.append(f"transactional producers that did not end cleanly: {self.txn_unclean}")
        if self.lso_stuck:
            out.append(f"last stable offset below the high watermark {self.lso_bound_s:.0f}s after the "
                       f"producers stopped: {self.lso_stuck[:6]}")
        if self.gap_bound_s and self.max_gap_with_majority_s > self.gap_bound_s:
            out.append(f"a partition went {self.max_gap_with_majority_s:.1f}s without an acknowledged "
                       f"write while a majority of its replicas was up (bound {self.gap_bound_s:.0f}s): "
                       f"{self.max_gap_with_majority_where}")
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


class ChaosRun:
    """Owns the namespaces and processes of one run; ``run()`` always tears them down."""

    def __init__(self, config: ChaosConfig) -> None:
        self.c = config
        self.base = config.base / f"seed-{config.seed}"
        shutil.rmtree(self.base, ignore_errors=True)  # a replayed seed starts from nothing
        prefix = process_prefix("q")
        self.names = [f"b{i}" for i in range(1, config.brokers + 1)]
        links = ([(b, "zk") for b in self.names] + [(b, "cl") for b in self.names]
                 + [(a, b) for i, a in enumerate(self.names) for b in self.names[i + 1:]])
        self.net = Network(prefix, ["zk", "cl", *self.names], links)
        self.zk = ZooKeeperProcess(self.base / "zk", port=2181, host=self.net.address("zk"),
                                   command_prefix=self.net.exec_prefix("zk"))
        self.brokers: dict[int, BrokerProcess] = {}
        for i, name in enumerate(self.names, start=1):
            overrides = {
                "broker.id": str(i), "zookeeper.connect": f"{self.net.address('zk')}:2181/dmq",
                "zookeeper.session.timeout.ms": str(config.session_timeout_ms),
                "replica.lag.time.max.ms": str(max(2000, config.session_timeout_ms * 3 // 4)),
                "replica.fetch.backoff.ms": "200", "controlled.shutdown.retry.backoff.ms": "1000",
                "controlled.shutdown.max.retries": "3", "group.initial.rebalance.delay.ms": "0",
                "offsets.topic.num.partitions": "6", "offsets.topic.replication.factor": "3",
                "leader.imbalance.check.interval.seconds": "3600",
                "unclean.leader.election.enable": "false",
                "transaction.state.log.num.partitions": str(TXN_STATE_PARTITIONS),
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(TXN_ABORT_INTERVAL_MS),
            }
            self.brokers[i] = BrokerProcess(self.base / name / "data", overrides, port=9092,
                                            log_path=self.base / f"broker-{i}.log",
                                            host=self.net.address(name),
                                            command_prefix=self.net.exec_prefix(name))
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())
        self.down: set[int] = set()  # brokers a fault stopped on purpose
        self.busy: set[int] = set()  # brokers some fault is acting on
        self.crashed: list[str] = []
        self.zk_down = False  # a zk_restart is under way: another one is skipped
        self.restart_deadline = 0.0  # monotonic; restarts retry a missing ZooKeeper until then
        self.dup_values: dict[str, int] = {}  # duplicated value -> extra copies
        self._restarts: list[threading.Thread] = []
        self._agent: subprocess.Popen[str] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        # Wall-clock windows when a broker (by id) or ZooKeeper (0) was unavailable.
        self.outages: dict[int, list[list[float]]] = defaultdict(list)
        self.assignment: dict[int, list[int]] = {}
        self.workload_started = 0.0
        self.report = Report(config.seed, recovery_bound_s=config.recovery_bound_s)

    # ------------------------------------------------------------- plumbing

    def _client(self, *args: str, stdin: Any = subprocess.PIPE, text: bool = False) -> Any:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *sys.path])}
        return subprocess.Popen([*self.net.exec_prefix("cl"), sys.executable, "-m", "chaos.workload",
                                 *args], stdin=stdin, stdout=subprocess.PIPE if text else None,
                                stderr=subprocess.DEVNULL, env=env, text=text)

    def ask(self, op: str, timeout: float = 30, **kw: Any) -> dict[str, Any]:
        """One request to the agent in the client namespace."""
        assert self._agent is not None and self._agent.stdin and self._agent.stdout
        self._agent.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self._agent.stdin.flush()
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self._agent.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            raise TimeoutError(f"agent did not answer {op} in {timeout}s")
        return dict(json.loads(result[0]))

    def metadata(self) -> dict[str, Any] | None:
        try:
            md = self.ask("metadata", timeout=15)
        except (TimeoutError, ValueError):
            return None
        return None if "error" in md else md

    # --------------------------------------------------------------- set up

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.net.create()
        self.zk.start(60)
        for b in self.brokers.values():
            b.start(timeout=60)
        self._agent = self._client("agent", "--bootstrap", self.bootstrap, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            md = self.metadata()
            if md and len(md["brokers"]) == len(self.brokers):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the brokers did not all register")
        for topic in self.topics():
            create = [sys.executable, "-m", "dmq", "topics", "create", topic, "--partitions",
                      str(self.c.partitions), "--replication-factor", "3", "--config",
                      "min.insync.replicas=2", "-b", self.bootstrap]
            subprocess.run([*self.net.exec_prefix("cl"), *create], check=True, capture_output=True,
                           timeout=60)
        self._wait_full_isr(self.topics(), 60)
        md = self.metadata() or {"topics": {}}
        self.assignment = {int(p): s["replicas"] for p, s in md["topics"].get(TOPIC, {}).items()}

    def topics(self) -> list[str]:
        """The topics the workload writes."""
        return [TOPIC, TXN_TOPIC] if self.c.transactions else [TOPIC]

    def _outage_begins(self, who: int) -> None:
        self.outages[who].append([time.time(), float("inf")])

    def _outage_ends(self, who: int) -> None:
        if self.outages[who] and self.outages[who][-1][1] == float("inf"):
            self.outages[who][-1][1] = time.time()

    def _start_workload(self) -> None:
        self.workload_started = time.time()
        for k in range(self.c.producers):
            self._workers.append(self._client(
                "produce", "--bootstrap", self.bootstrap, "--topic", TOPIC, "--partitions",
                str(self.c.partitions), "--producer", str(k), "--rate", str(self.c.rate),
                "--out", str(self.base / f"acks-{k}.jsonl")))
        self._workers.append(self._client("consume", "--bootstrap", self.bootstrap, "--topic", TOPIC,
                                          "--group", GROUP, "--out", str(self.base / "consumer.json")))
        for k in range(self.c.transactions):
            self._workers.append(self._client(
                "txn-produce", "--bootstrap", self.bootstrap, "--topic", TXN_TOPIC, "--partitions",
                str(self.c.partitions), "--producer", str(k), "--rate", str(self.c.txn_rate),
                "--size", str(self.c.txn_size), "--txn-timeout-ms", str(self.c.txn_timeout_ms),
                "--out", str(self.base / f"txns-{k}.jsonl")))
        if self.c.transactions:
            # The first InitProducerId creates __transaction_state, with as many replicas as
            # brokers are alive: before the first fault, so that it gets all three.
            self._wait_full_isr([TXN_STATE], 30)

    # --------------------------------------------------------------- faults

    def _healthy(self) -> list[int]:
        return [i for i in self.brokers if i not in self.busy and i not in self.down]

    def _pick(self, rng: random.Random, kind: str, leader_of: int | None = None,
              topic: str = TOPIC) -> list[int]:
        healthy = self._healthy()
        if not healthy:
            return []
        if leader_of is not None:
            md = self.metadata()
            part = (md or {"topics": {}})["topics"].get(topic, {}).get(str(leader_of))
            return [part["leader"]] if part and part["leader"] in healthy else []
        md = self.metadata() if kind in ("kill_leader", "kill_follower", "kill_controller") else None
        if md is not None and kind == "kill_controller" and md["controller"] in healthy:
            return [md["controller"]]
        if md is not None and kind in ("kill_leader", "kill_follower"):
            parts = list(md["topics"].get(TOPIC, {}).values())
            rng.shuffle(parts)
            for p in parts:
                wanted = [p["leader"]] if kind == "kill_leader" else \
                    [r for r in p["replicas"] if r != p["leader"]]
                wanted = [r for r in wanted if r in healthy]
                if wanted:
                    return [rng.choice(wanted)]
        if kind == "kill_two":
            return rng.sample(healthy, 2) if len(healthy) >= 2 else []
        return [rng.choice(healthy)]

    def _restart(self, i: int) -> None:
        """Start a broker again in the background, as a supervisor would: a broker refuses
        to start while ZooKeeper is unreachable, so that is retried; anything else that
        stops it from starting is a crash."""
        def run() -> None:
            deadline = max(time.monotonic() + 150, self.restart_deadline)
            while True:
                # This attempt's part of the log: its error line can be far from the end of
                # the exception's log tail (kazoo logs each reconnect while the process exits).
                since = len(self.brokers[i].log_text())
                try:
                    self.brokers[i].start(timeout=90)
                    self._outage_ends(i)
                    break
                except Exception as e:  # noqa: BLE001 - reported as a crash unless retried
                    self.brokers[i].proc = None
                    attempt = self.brokers[i].log_text()[since:]
                    errors = [line for line in attempt.splitlines() if line.startswith("error:")]
                    if any("cannot connect to ZooKeeper" in line for line in errors) \
                            and time.monotonic() < deadline:
                        time.sleep(1.0)
                        continue
                    why = errors[-1] if errors else str(e)[-300:]
                    self.crashed.append(f"broker {i} did not start again: {why}")
                    return  # stays down: no later fault picks a broker that is not running
            self.down.discard(i)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self._restarts.append(t)

    def _begin(self, fault: Fault, rng: random.Random) -> Any:
        """Start a fault; returns the function that ends it (or None if it could not start)."""
        if fault.kind == "zk_restart":
            if self.zk_down:
                fault.target = "(skipped: ZooKeeper is already down)"
                return None
            fault.target = "zookeeper"
            self.zk_down = True
            self.zk.stop()
            self._outage_begins(0)

            def end_zk() -> None:
                self.zk.start(60)
                self.zk_down = False
                self._outage_ends(0)
            return end_zk
        targets = self._pick(rng, fault.kind, fault.leader_of, fault.topic)
        if targets and fault.after_commit_of is not None:  # the target is known: no delay after
            fault.target = self._await_commit(fault.after_commit_of)
        if not targets:
            fault.target = "(skipped: no healthy target)" + fault.target
            return None
        fault.target = "broker " + "+".join(map(str, targets)) + fault.target
        self.busy.update(targets)

        def done() -> None:
            self.busy.difference_update(targets)

        if fault.kind.startswith("kill"):
            for i in targets:
                self.down.add(i)
                self._outage_begins(i)
                self.brokers[i].kill()

            def end_kill() -> None:
                for i in targets:
                    self._restart(i)
                done()
            return end_kill
        if fault.kind == "term":
            i = targets[0]
            self.down.add(i)
            self._outage_begins(i)
            proc = self.brokers[i].proc
            assert proc is not None
            proc.send_signal(signal.SIGTERM)

            def end_term() -> None:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.crashed.append(f"broker {i} did not exit within 30 s of SIGTERM")
                    proc.kill()
                    proc.wait(10)
                self.brokers[i].proc = None
                self._restart(i)
                done()
            return end_term
        if fault.kind == "pause":
            i = targets[0]
            os.kill(self.brokers[i].pid(), signal.SIGSTOP)
            self.brokers[i].paused = True
            self._outage_begins(i)

            def end_pause() -> None:
                os.kill(self.brokers[i].pid(), signal.SIGCONT)
                self.brokers[i].paused = False
                self._outage_ends(i)
                done()
            return end_pause
        name = self.names[targets[0] - 1]
        peers = {"cut_zk": ["zk"], "cut_peers": ["cl", *[n for n in self.names if n != name]],
                 "cut_all": ["zk", "cl", *[n for n in self.names if n != name]]}[fault.kind]
        self.net.isolate(name, peers)
        if fault.kind != "cut_zk":  # cut from ZooKeeper only, it still serves its clients
            self._outage_begins(targets[0])

        def end_cut() -> None:
            for p in peers:
                self.net.heal(name, p)
            if fault.kind != "cut_zk":
                self._outage_ends(targets[0])
            done()
        return end_cut

    def _await_commit(self, producer: int, timeout: float = 60) -> str:
        """Wait for transactional producer ``producer`` to report a commit it had not reported
        when this was called; returns what it saw, for the fault's description."""
        path = self.base / f"txns-{producer}.jsonl"
        pos = path.stat().st_size if path.exists() else 0
        buf = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                with open(path) as f:
                    f.seek(pos)
                    chunk = f.read()
                pos += len(chunk.encode())
                buf += chunk
                *lines, buf = buf.split("\n")
                for line in lines:
                    entry = json.loads(line)
                    if entry.get("outcome") == "committed":
                        return (f" ({(time.time() - entry['t']) * 1000:.0f} ms after producer {producer} "
                                f"committed transaction {entry['txn']})")
            time.sleep(0.001)
        return f" (producer {producer} committed nothing in {timeout:.0f}s)"

    def _run_schedule(self, faults: list[Fault]) -> None:
        rng = random.Random(self.c.seed * 7919 + 1)
        start = time.monotonic()
        last_end = max((f.at + f.duration for f in faults), default=0.0)
        self.restart_deadline = start + last_end + 150
        active: list[tuple[float, Fault, Any]] = []
        pending = list(faults)
        while pending or active:
            now = time.monotonic() - start
            for entry in [a for a in active if a[0] <= now]:
                active.remove(entry)
                entry[2]()
            while pending and pending[0].at <= now:
                fault = pending.pop(0)
                end = self._begin(fault, rng)
                if end is None:
                    fault.target = fault.target or "(skipped: no healthy target)"
                else:
                    active.append((now + fault.duration, fault, end))
                self.report.faults.append(fault.describe())
                print(f"  fault {fault.describe()}", flush=True)
            self._note_crashes()
            time.sleep(0.1)
        for t in self._restarts:
            t.join(120)

    def _note_crashes(self) -> None:
        for i, b in self.brokers.items():
            if i not in self.down and b.proc is not None and b.proc.poll() is not None:
                self.crashed.append(f"broker {i} exited with {b.proc.returncode} on its own")
                b.proc = None
                self.down.add(i)
                self._outage_begins(i)
                self._restart(i)

    # --------------------------------------------------------------- checks

    def _wait_full_isr(self, topics: list[str], timeout: float) -> tuple[float, list[str]]:
        start = time.monotonic()
        missing: list[str] = ["no metadata"]
        while time.monotonic() - start < timeout:
            md = self.metadata()
            if md is not None:
                missing = []
                for t in topics:
                    parts = md["topics"].get(t)
                    if not parts:
                        missing.append(f"{t}: unknown")
                        continue
                    for p, s in parts.items():
                        if s["leader"] < 0 or sorted(s["isr"]) != sorted(s["replicas"]):
                            missing.append(f"{t}-{p} leader {s['leader']} isr {s['isr']} replicas {s['replicas']}")
                if not missing and len(md["brokers"]) == len(self.brokers):
                    return time.monotonic() - start, []
            time.sleep(0.25)
        return time.monotonic() - start, missing

    def _stop_workload(self) -> None:
        for w in self._workers:
            if w.stdin is not None:
                w.stdin.close()
        for w in self._workers:
            try:
                w.wait(180)
            except subprocess.TimeoutExpired:
                w.kill()

    def _check_records(self) -> None:
        acks: list[dict[str, Any]] = []
        errors = 0
        for k in range(self.c.producers):
            path = self.base / f"acks-{k}.jsonl"
            if path.exists():
                for line in path.read_text().splitlines():
                    entry = json.loads(line)
                    if "err" in entry:
                        errors += 1
                    else:
                        acks.append(entry)
        self.report.acknowledged = len(acks)
        self.report.producer_errors = errors
        dump = self.ask("dump", timeout=200, topic=TOPIC, partitions=self.c.partitions,
                        out=str(self.base / "dump.json"))
        if "error" in dump:
            self.report.lost.append(f"could not read the topic back: {dump['error']}")
            return
        data = json.loads((self.base / "dump.json").read_text())
        if data["incomplete"]:
            self.report.lost.append(f"partitions not read to their high watermark: {data['incomplete']}")
        at: dict[tuple[int, int], str] = {}
        for p, recs in data["records"].items():
            for o, v in recs:
                at[(int(p), int(o))] = v
        self.report.lost.extend(find_lost(acks, {int(p): recs for p, recs in data["records"].items()}))
        self.report.records_read = len(at)
        counts = Counter(at.values())
        dups = {v: n for v, n in counts.items() if n > 1}
        self.report.duplicates = sum(n - 1 for n in dups.values())
        self.report.duplicate_examples = [f"{v} x{n}" for v, n in list(dups.items())[:10]]
        self.dup_values = {v: n - 1 for v, n in dups.items()}
        for p, recs in data["records"].items():
            last: dict[str, int] = {}
            seen: set[str] = set()
            for o, v in sorted(recs):
                if v in seen:
                    continue
                seen.add(v)
                producer, seq = v.rsplit("-", 1)
                if int(seq) < last.get(producer, -1):
                    self.report.reordered.append(f"partition {p}: {v} at {o} after seq {last[producer]}")
                last[producer] = max(last.get(producer, -1), int(seq))
        by_partition: dict[int, list[float]] = defaultdict(list)
        for a in acks:
            by_partition[a["p"]].append(a["t"])
        for p, times in by_partition.items():
            times.sort()
            for t0, t1 in zip(times, times[1:], strict=False):
                if t1 - t0 > self.report.max_ack_gap_s:
                    self.report.max_ack_gap_s = round(t1 - t0, 2)
                    self.report.max_ack_gap_where = f"partition {p} at {time.strftime('%H:%M:%S', time.localtime(t0))}"
        self._majority_gaps(acks)
        consumer = self.base / "consumer.json"
        if consumer.exists():
            self.report.consumed = int(json.loads(consumer.read_text()).get("consumed", 0))

    def _majority_gaps(self, acks: list[dict[str, Any]]) -> None:
        """The longest stretch without an acknowledged write, per partition, counting only
        time when ZooKeeper and a majority of the partition's replicas were up."""
        if self.c.check_availability:
            self.report.gap_bound_s = 2 * self.c.session_timeout_ms / 1000 + 5
        end = max((a["t"] for a in acks), default=self.workload_started)
        times: dict[int, list[float]] = defaultdict(list)
        for a in acks:
            times[a["p"]].append(a["t"])
        for p, replicas in self.assignment.items():
            bad = self._bad_windows(replicas, end)
            marks = [self.workload_started, *sorted(times.get(p, [])), end]
            for t0, t1 in zip(marks, marks[1:], strict=False):
                good = longest_good_stretch(t0, t1, bad)
                if good > self.report.max_gap_with_majority_s:
                    self.report.max_gap_with_majority_s = round(good, 2)
                    self.report.max_gap_with_majority_where = (
                        f"partition {p} from {time.strftime('%H:%M:%S', time.localtime(t0))}")

    def _bad_windows(self, replicas: list[int], end: float) -> list[tuple[float, float]]:
        """Windows when ZooKeeper was down or fewer than a majority of ``replicas`` were up."""
        points = sorted({t for who in [0, *replicas] for w in self.outages[who]
                         for t in (w[0], min(w[1], end))})
        bad: list[tuple[float, float]] = []
        for a, b in zip(points, points[1:], strict=False):
            mid = (a + b) / 2
            def down(who: int, at: float = mid) -> bool:
                return any(w[0] <= at < w[1] for w in self.outages[who])
            if down(0) or sum(down(r) for r in replicas) > len(replicas) // 2:
                bad.append((a, b))
        return bad

    def _check_committed(self) -> None:
        committed = self.ask("committed", group=GROUP, topic=TOPIC, partitions=self.c.partitions)
        marks = self.ask("watermarks", topic=TOPIC, partitions=self.c.partitions)
        if "error" in committed or "error" in marks:
            self.report.committed_above_hw.append(f"could not read: {committed} {marks}")
            return
        for p, off in committed.items():
            if off >= 0 and off > marks[p][1]:
                self.report.committed_above_hw.append(f"{TOPIC}-{p}: committed {off} > hw {marks[p][1]}")

    def _wait_stable(self) -> None:
        """After the producers stopped: the last stable offset of every partition of TXN_TOPIC
        reaches its high watermark (no transaction left hanging). Producers that ended cleanly
        left no transaction open, so only markers can still be on their way: recovery_bound_s.
        Otherwise an abandoned transaction waits for its timeout and the coordinator's sweep."""
        clean = not self.report.txn_unclean
        bound = self.c.recovery_bound_s if clean else \
            self.c.txn_timeout_ms / 1000 + TXN_ABORT_INTERVAL_MS / 1000 + self.c.recovery_bound_s
        self.report.lso_bound_s = bound
        start = time.monotonic()
        behind: list[str] = ["no answer"]
        while True:
            try:
                ends = self.ask("end_offsets", timeout=40, topic=TXN_TOPIC, partitions=self.c.partitions)
            except TimeoutError as e:
                ends = {"error": str(e)}
            if "error" in ends:
                behind = [f"could not list offsets: {ends['error']}"]
            else:
                behind = [f"{TXN_TOPIC}-{p}: lso {lso} < hw {hw}" for p, (hw, lso) in sorted(ends.items())
                          if lso != hw]
                if not behind:
                    self.report.lso_wait_s = round(time.monotonic() - start, 2)
                    return
            if time.monotonic() - start > bound:
                self.report.lso_stuck = behind
                self.report.lso_wait_s = round(time.monotonic() - start, 2)
                return
            time.sleep(0.5)

    def _check_transactions(self) -> None:
        """What the transactional producers reported against what read_committed reads:
        committed transactions exactly once, aborted ones not at all, unknown ones all or
        nothing, each producer's transactions in order per partition."""
        outcome: dict[str, tuple[int, int, str]] = {}  # value -> (producer, txn, outcome)
        unknown: dict[tuple[int, int], list[str]] = {}
        last_txn: dict[int, int] = {}
        for k in range(self.c.transactions):
            path = self.base / f"txns-{k}.jsonl"
            lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
            if not any(e.get("exit") for e in lines):
                self.report.txn_unclean.append(f"producer {k}: no exit line")
            elif any(e.get("exit") and e.get("last_unresolved") for e in lines):
                self.report.txn_unclean.append(f"producer {k}: left a transaction to its timeout")
            ends = [self.workload_started, *(e["t"] for e in lines if "outcome" in e)]
            for t0, t1 in zip(ends, ends[1:], strict=False):
                if t1 - t0 > self.report.max_txn_gap_s:
                    self.report.max_txn_gap_s = round(t1 - t0, 2)
                    self.report.max_txn_gap_where = \
                        f"producer {k} from {time.strftime('%H:%M:%S', time.localtime(t0))}"
            for e in lines:
                if e.get("init") is True:
                    self.report.txn_producers_created += 1
                if "outcome" not in e:
                    continue
                last_txn[k] = max(last_txn.get(k, -1), e["txn"])
                kind = e["outcome"]
                self.report.txn_committed += kind == "committed"
                self.report.txn_aborted += kind == "aborted"
                self.report.txn_unknown += kind == "unknown"
                for v in e["values"]:
                    outcome[v] = (k, e["txn"], kind)
                if kind == "unknown" and e["values"]:
                    unknown[(k, e["txn"])] = e["values"]
        self._wait_stable()
        out = self.base / "txn-read.json"
        read = self.ask("read_committed", timeout=200, topic=TXN_TOPIC, partitions=self.c.partitions,
                        out=str(out))
        if "error" in read:
            self.report.txn_lost.append(f"could not read {TXN_TOPIC}: {read['error']}")
            return
        data = json.loads(out.read_text())
        if data["incomplete"]:
            self.report.txn_lost.append(f"partitions not read to their end: {data['incomplete']}")
        seen: Counter[str] = Counter()
        for p, recs in sorted(data["records"].items()):
            last: dict[int, tuple[int, int]] = {}  # producer -> (txn, offset) last read here
            for o, v in sorted(recs):
                seen[v] += 1
                m = TXN_VALUE.fullmatch(v)
                known = outcome.get(v)
                if m is None or (known is None and not (
                        int(m.group(2)) > last_txn.get(int(m.group(1)), -1)
                        and f"producer {m.group(1)}: no exit line" in self.report.txn_unclean)):
                    self.report.txn_unexplained.append(f"{TXN_TOPIC}-{p}@{o}: {v}")
                    continue
                producer, txn = int(m.group(1)), int(m.group(2))
                if known is not None and known[2] == "aborted":
                    self.report.txn_aborted_visible.append(f"{TXN_TOPIC}-{p}@{o}: {v}")
                if txn < last.get(producer, (-1, -1))[0]:
                    self.report.txn_reordered.append(
                        f"{TXN_TOPIC}-{p}: {v} at {o} after transaction {last[producer][0]} at {last[producer][1]}")
                if txn >= last.get(producer, (-1, -1))[0]:
                    last[producer] = (txn, o)
        self.report.txn_records_read = sum(seen.values())
        self.report.txn_duplicates = [f"{v} x{n}" for v, n in seen.items() if n > 1]
        self.report.txn_lost = [v for v, (_k, _t, kind) in outcome.items()
                                if kind == "committed" and not seen[v]] + self.report.txn_lost
        for (k, txn), values in sorted(unknown.items()):
            visible = sum(1 for v in values if seen[v])
            if visible == len(values):
                self.report.txn_unknown_committed += 1
            elif visible == 0:
                self.report.txn_unknown_aborted += 1
            else:
                self.report.txn_partial.append(f"producer {k} transaction {txn}: {visible} of "
                                               f"{len(values)} records visible")

    def _check_replicas(self) -> None:
        """After a clean shutdown: every replica's batches below the high watermark are the
        same bytes (topics, __consumer_offsets and __transaction_state)."""
        hws: dict[str, int] = {}
        logs: dict[str, dict[int, list[tuple[int, bytes]]]] = defaultdict(dict)
        for i, name in enumerate(self.names, start=1):
            data = self.base / name / "data"
            checkpoint = data / "replication-offset-checkpoint"
            if checkpoint.exists():
                for line in checkpoint.read_text().splitlines()[2:]:
                    topic, p, off = line.rsplit(" ", 2)
                    key = f"{topic}-{p}"
                    hws[key] = max(hws.get(key, 0), int(off))
            for d in data.iterdir() if data.exists() else []:
                if d.is_dir() and d.name.rsplit("-", 1)[0] in (*self.topics(), OFFSETS, TXN_STATE):
                    logs[d.name][i] = read_batches(d)
        for key, replicas in logs.items():
            self.report.replicas_compared += len(replicas)
            hw = hws.get(key, 0)
            reach = {b: max((last for last, _ in batches), default=-1) for b, batches in replicas.items()}
            if key.rsplit("-", 1)[0] in (OFFSETS, TXN_STATE):
                # The coordinators write on their own timers (a member's session expiring, a
                # transaction timing out) while the brokers shut down one by one: a broker that
                # left the ISR by its clean shutdown rightly misses what was written after.
                # Its log must still be a prefix of the others.
                hw = min(hw, min(reach.values(), default=-1) + 1)
            below = {b: b"".join(raw for last, raw in batches if last < hw) for b, batches in replicas.items()}
            if len(set(below.values())) > 1:
                self.report.divergent.append(f"{key}: replicas differ below the high watermark {hw}")
            short = [b for b, end in reach.items() if end < hw - 1]
            if short:
                self.report.divergent.append(f"{key}: brokers {short} end below the high watermark {hw}")

    def _trace_duplicates(self) -> None:
        """Classify each duplicated value by the batches holding its copies on disk.

        Copies written under different producer ids or epochs are a client re-send under
        a new identity (librdkafka bumps its epoch, KIP-360, after an out-of-order
        sequence error and re-sends what was not acknowledged, including batches that had
        been written); no broker can deduplicate those. Copies under the same producer id
        and epoch mean the broker failed to deduplicate a retry: always a failure.
        Also counts produce rejections and epoch bumps from the broker logs."""
        for log_path in sorted(self.base.glob("broker-*.log")):
            for line in log_path.read_text(errors="replace").splitlines():
                m = re.search(r"rejected produce to \S+: (\w+): ", line)
                if m:
                    self.report.produce_rejections[m.group(1)] = self.report.produce_rejections.get(m.group(1), 0) + 1
                if "asked to bump its epoch" in line:
                    self.report.epoch_bumps += 1
        epochs: dict[int, set[int]] = defaultdict(set)
        data = self.base / self.names[0] / "data"
        for d in sorted(data.glob(f"{TOPIC}-*")) if data.exists() else []:
            for _last, raw in read_batches(d):
                producer_id, producer_epoch = struct.unpack_from(">qh", raw, 43)
                if producer_id >= 0:
                    epochs[producer_id].add(producer_epoch)
        self.report.epoch_bumps += sum(len(e) - 1 for e in epochs.values())
        wanted = set(self.dup_values)
        if not wanted:
            return
        # value -> broker -> [(offset, producer id, producer epoch)]
        copies: dict[str, dict[int, list[tuple[int, int, int]]]] = defaultdict(lambda: defaultdict(list))
        for i, name in enumerate(self.names, start=1):
            data = self.base / name / "data"
            for d in sorted(data.glob(f"{TOPIC}-*")) if data.exists() else []:
                for _last, raw in read_batches(d):
                    try:
                        header, records = decode_batch(raw)
                    except ValueError:
                        continue
                    for k, r in enumerate(records):
                        value = r.value.decode(errors="replace") if r.value is not None else ""
                        if value in wanted:
                            copies[value][i].append(
                                (header.base_offset + k, header.producer_id, header.producer_epoch))
                            if len(self.report.duplicate_batches) < 40:
                                self.report.duplicate_batches.append(
                                    f"{value} on broker {i} {d.name}@{header.base_offset + k}: batch "
                                    f"{header.base_offset}-{header.last_offset} leader epoch "
                                    f"{header.partition_leader_epoch} producer {header.producer_id} "
                                    f"epoch {header.producer_epoch} seq {header.base_sequence}-"
                                    f"{header.last_sequence}")
        bumped, same = classify_duplicates(self.dup_values, copies)
        self.report.duplicates_after_epoch_bump += bumped
        self.report.duplicates_same_producer += same

    def _check_logs(self) -> None:
        for i, b in self.brokers.items():
            text = b.log_text()
            if "Traceback" in text:
                idx = text.index("Traceback")
                self.report.tracebacks.append(f"broker {i}: {text[max(0, idx - 200):idx + 600]}")

    # ----------------------------------------------------------------- run

    def run(self, faults: list[Fault] | None = None) -> Report:
        """The seeded schedule, or the ``faults`` given (a scripted run), then every check."""
        started = time.monotonic()
        if faults is None:
            faults = make_schedule(self.c.seed, self.c.duration_s, self.c.session_timeout_ms / 1000,
                                   self.c.max_zk_outage_s)
        self.report.faults_by_kind = dict(Counter(f.kind for f in faults))
        try:
            self.start()
            self._start_workload()
            self._run_schedule(faults)
            # Heal: the schedule ended every fault; restart anything still down.
            self.net.heal_all()
            if self.zk.proc is None:
                self.zk.start(60)
            for i, b in self.brokers.items():
                if b.proc is None:
                    self._restart(i)
            for t in self._restarts:
                t.join(120)
            self._note_crashes()
            internal = [OFFSETS, TXN_STATE] if self.c.transactions else [OFFSETS]
            self.report.recovery_s, self.report.unrecovered = self._wait_full_isr(
                [*self.topics(), *internal], max(60.0, self.c.recovery_bound_s * 3))
            self.report.recovery_s = round(self.report.recovery_s, 2)
            self._stop_workload()
            self._check_records()
            self._check_committed()
            if self.c.transactions:
                self._check_transactions()
            time.sleep(2)  # let followers fetch the last records before the shutdown
            for b in self.brokers.values():
                if b.proc is not None:
                    b.stop(60)
            self._check_replicas()
            self._trace_duplicates()
            self._check_logs()
            self.report.crashes = list(self.crashed)
        finally:
            self.teardown()
            self.report.wall_s = round(time.monotonic() - started, 1)
            (self.base / "report.json").write_text(self.report.to_json())
        return self.report

    def teardown(self) -> None:
        for w in self._workers:
            if w.poll() is None:
                w.kill()
        if self._agent is not None and self._agent.poll() is None:
            self._agent.kill()
        for b in self.brokers.values():
            try:
                if b.proc is not None and b.paused:
                    os.kill(b.pid(), signal.SIGCONT)
                b.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
        try:
            self.zk.stop()
        except Exception:  # noqa: BLE001
            pass
        self.net.destroy()


def txn_coordinator_partition(producer: int) -> int:
    """The __transaction_state partition of transactional producer ``producer``: its leader
    is that producer's transaction coordinator."""
    return partition_for(f"chaos-txn-{producer}", TXN_STATE_PARTITIONS)


def after_commit_faults(session_timeout_s: float) -> list[Fault]:
    """A scripted schedule for two transactional producers: each fault starts the moment a
    producer has a commit acknowledged, while the coordinator is writing its markers. Its
    transaction coordinator killed, paused past its session, cut off, shut down; the leader
    of a partition the transaction wrote killed."""
    def coordinator(at: float, kind: str, duration: float, producer: int) -> Fault:
        return Fault(at, kind, duration, leader_of=txn_coordinator_partition(producer), topic=TXN_STATE,
                     after_commit_of=producer)
    return [
        coordinator(5, "kill_leader", 3, 0),
        Fault(15, "kill_leader", 3, leader_of=0, topic=TXN_TOPIC, after_commit_of=1),
        coordinator(25, "pause", session_timeout_s + 2, 1),
        coordinator(40, "cut_all", 2 * session_timeout_s, 0),
        coordinator(60, "term", 3, 1),
        coordinator(70, "kill_leader", 3, 1),
        Fault(80, "kill_leader", 3, leader_of=3, topic=TXN_TOPIC, after_commit_of=0),
    ]


def read_batches(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(last offset, raw bytes) of every record batch in a partition directory, in order."""
    out: list[tuple[int, bytes]] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            (last_delta,) = struct.unpack_from(">i", data, pos + 23)
            out.append((base + last_delta, data[pos:pos + 12 + length]))
            pos += 12 + length
    return out


def find_lost(acks: list[dict[str, Any]], records: dict[int, list[tuple[int, str]]]) -> list[str]:
    """Acknowledged values not where their acknowledgement put them.

    An acknowledgement with an offset must find its value at that offset. One without
    (librdkafka's "implicit ack": a batch whose reply was lost is known persisted because
    a later batch of the same producer succeeded) must find it somewhere in its partition.
    """
    at = {(p, int(o)): v for p, recs in records.items() for o, v in recs}
    values = {p: {v for _, v in recs} for p, recs in records.items()}
    lost = []
    for a in acks:
        if a["o"] is None:
            if a["v"] not in values.get(a["p"], set()):
                lost.append(f"{a['v']}@{a['p']}:None (found nowhere in partition {a['p']})")
        elif at.get((a["p"], a["o"])) != a["v"]:
            lost.append(f"{a['v']}@{a['p']}:{a['o']} (found {at.get((a['p'], a['o']))})")
    return lost


def classify_duplicates(dup_values: dict[str, int],
                        copies: dict[str, dict[int, list[tuple[int, int, int]]]]) -> tuple[int, int]:
    """(re-sent after an epoch bump, not deduplicated) extra copies, given for each duplicated
    value its extra copy count and, per broker, its copies as (offset, producer id, epoch).
    A value counts as re-sent only when every copy on the replica holding the most has its
    own producer identity; anything else, including a value found on no disk, is the broker's."""
    bumped = same = 0
    for value, extra in dup_values.items():
        held = max(copies.get(value, {}).values(), key=len, default=[])
        identities = {(pid, epoch) for _offset, pid, epoch in held}
        if len(held) > 1 and len(identities) == len(held):
            bumped += extra
        else:
            same += extra
    return bumped, same


def longest_good_stretch(t0: float, t1: float, bad: list[tuple[float, float]]) -> float:
    """The longest part of [t0, t1] outside every ``bad`` window (sorted, disjoint)."""
    best, cursor = 0.0, t0
    for a, b in bad:
        if b <= cursor or a >= t1:
            continue
        best = max(best, min(a, t1) - cursor)
        cursor = max(cursor, b)
    return max(best, t1 - cursor)
