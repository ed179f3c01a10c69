"""``dmq cluster``: a local cluster run by the CLI, with real ZooKeeper and broker processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic
from support.cluster_cli import CliCluster, lines_matching, processes_under
from support.zookeeper import available

TEST_LIMIT_S = 150
MakeCluster = Callable[..., CliCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[MakeCluster]:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    made: list[CliCluster] = []

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"test still running after {TEST_LIMIT_S} s")

    def make(brokers: int = 3, overrides: dict[str, str] | None = None) -> CliCluster:
        c = CliCluster(tmp_path / f"cluster{len(made)}", brokers, overrides)
        made.append(c)
        return c

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_LIMIT_S)  # every wait has its own timeout; this bounds their sum
    try:
        yield make
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for c in made:
            c.close()


def create_topic(c: CliCluster, name: str, partitions: int, rf: int,
                 config: dict[str, str] | None = None) -> None:
    admin = c.admin()
    admin.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    c.wait_for(lambda: all(len(p.isrs) == rf and p.leader >= 0 for p in
                           admin.list_topics(name, timeout=10).topics[name].partitions.values()),
               f"{name} fully in sync")


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """acks=all, every record acknowledged."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 30000, "topic.metadata.refresh.interval.ms": 1000})
    for v in values:
        p.produce(topic, v.encode(), on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(40) == 0, "records still in flight"
    assert not errors, errors


def test_ctrl_c_on_a_foreground_cluster_stops_brokers_cleanly_then_zookeeper(make_cluster: MakeCluster) -> None:
    c = make_cluster(brokers=2)
    proc = c.start_foreground()
    c.wait_output("bootstrap servers")
    # Each broker leads a partition the other replicates: controlled shutdown has leadership to move.
    create_topic(c, "ctrl-c", partitions=2, rf=2)
    produce(c.bootstrap, "ctrl-c", [str(i) for i in range(20)])

    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    assert proc.wait(90) == 0, c.output()

    assert processes_under(c.base) == {}, c.output()
    for b in (1, 2):
        log = c.log(b)
        assert "controlled shutdown: leadership moved away" in log, log[-3000:]
        assert "cannot reach ZooKeeper" not in log and "incomplete" not in log, log[-3000:]
        assert "shut down cleanly" in log, log[-3000:]
    out = c.output()
    stopped = lines_matching(out, r"broker \d stopped")
    zk = lines_matching(out, r"ZooKeeper stopped")
    assert len(stopped) == 2 and len(zk) == 1 and max(stopped) < zk[0], out


def consume_all(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list[str]:
    """Subscribe as a group (so __consumer_offsets gets created) and read ``n`` values."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [m.value().decode() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return got


def table_rows(text: str) -> list[list[str]]:
    """The cells of a rich table's rows, unstripped (so alignment shows)."""
    return [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]


def broker_rows(status_out: str) -> dict[int, list[str]]:
    """broker id -> [broker, state, pid, host, port, role] cells of `dmq cluster status` output."""
    rows = {}
    for cells in table_rows(status_out):
        if len(cells) == 6 and cells[0].strip().isdigit():
            rows[int(cells[0])] = cells
    return rows


def right_aligned(cell: str) -> bool:
    return cell.endswith(" ") and not cell.endswith("  ") and cell.strip() != ""


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_failover_by_killing_stopping_and_restarting_single_brokers(make_cluster: MakeCluster) -> None:
    c = make_cluster(brokers=3)
    supervisor = c.start_foreground()
    c.wait_output("bootstrap servers")
    ids = [1, 2, 3]
    create_topic(c, "failover", partitions=1, rf=3, config={"min.insync.replicas": "2"})
    produce(c.bootstrap, "failover", [f"a{i}" for i in range(100)])

    def partition(via: list[int] | None = None) -> Any:
        return c.admin(via).list_topics("failover", timeout=10).topics["failover"].partitions[0]

    def bootstrap(via: list[int]) -> str:
        return ",".join(f"127.0.0.1:{c.ports[i]}" for i in via)

    # SIGKILL the leader: the cluster (and `dmq cluster start`) keeps running, the partition fails over.
    leader = partition().leader
    others = [i for i in ids if i != leader]
    res = c.cluster("kill", "--broker", str(leader))
    assert res.returncode == 0, res.stderr
    assert f"broker {leader} killed" in res.stdout
    c.wait_output(f"broker {leader} exited (SIGKILL)")
    c.wait_for(lambda: partition(others).leader in others, "a new leader")
    assert supervisor.poll() is None, c.output()
    produce(bootstrap(others), "failover", [f"b{i}" for i in range(100)])
    expected = [f"a{i}" for i in range(100)] + [f"b{i}" for i in range(100)]
    assert consume_all(bootstrap(others), "failover", 200) == expected

    # status: the killed broker is stopped, the others run; numbers right-aligned; internal topics hidden
    c.wait_for(lambda: "__consumer_offsets" in c.admin(others).list_topics(timeout=10).topics,
               "__consumer_offsets created")
    res = c.cluster("status")
    assert res.returncode == 0, res.stderr
    rows = broker_rows(res.stdout)
    assert sorted(rows) == ids, res.stdout
    assert rows[leader][1].strip().startswith("stopped") and rows[leader][2].strip() == "-"
    for i in others:
        assert rows[i][1].strip() == "running" and int(rows[i][2]) > 0, res.stdout
        assert int(rows[i][4]) == c.ports[i]
    assert all(right_aligned(rows[i][col]) for i in ids for col in (0, 2, 4)), res.stdout
    parts = [cells for cells in table_rows(res.stdout) if cells[0].strip() == "failover"]
    assert parts and all(right_aligned(p[1]) and right_aligned(p[2]) for p in parts), res.stdout
    assert "__consumer_offsets" not in res.stdout and "failover" in res.stdout
    res = c.cluster("status", "--include-internal")
    assert res.returncode == 0 and "__consumer_offsets" in res.stdout, res.stderr

    # restart it: same config and data dir; it catches up and rejoins the ISR
    offset = len(c.log(leader))
    res = c.cluster("start", "--broker", str(leader))
    assert res.returncode == 0, res.stderr
    assert f"broker {leader} started again on 127.0.0.1:{c.ports[leader]}" in res.stdout
    c.wait_output(f"broker {leader} is running again")
    c.wait_for(lambda: sorted(partition().isrs) == ids, "the restarted broker back in the ISR", 40)
    # its own data dir, left by the SIGKILL: the logs it had, recovered after an unclean shutdown
    assert re.search(r"loaded [1-9]\d* logs .*\(unclean shutdown\)", c.log(leader)[offset:])

    # stop the current leader: a controlled shutdown moves leadership before it exits
    current = partition().leader
    rest = [i for i in ids if i != current]
    offset = len(c.log(current))
    res = c.cluster("stop", "--broker", str(current))
    assert res.returncode == 0, res.stderr
    assert f"broker {current} stopped (controlled shutdown: leadership moved away" in res.stdout
    assert "shut down cleanly" in c.log(current)[offset:]
    c.wait_for(lambda: partition(rest).leader in rest, "leadership moved", 5)
    produce(bootstrap(rest), "failover", [f"c{i}" for i in range(50)])
    assert supervisor.poll() is None, c.output()

    # the whole cluster: brokers one by one with controlled shutdown, ZooKeeper last
    offsets = {i: len(c.log(i)) for i in rest}
    res = c.cluster("stop")
    assert res.returncode == 0, res.stderr
    stopped = lines_matching(res.stdout, r"broker \d stopped \(controlled shutdown: leadership moved away")
    zk = lines_matching(res.stdout, r"ZooKeeper stopped")
    assert len(stopped) == 2 and len(zk) == 1 and max(stopped) < zk[0], res.stdout
    assert f"broker {current} is already stopped" in res.stdout
    for i in rest:
        log = c.log(i)[offsets[i]:]
        assert "controlled shutdown: leadership moved away" in log and "shut down cleanly" in log, log
    assert supervisor.wait(20) == 0, c.output()
    assert "cluster stopped (by `dmq cluster stop`)" in c.output()
    assert processes_under(c.base) == {}
    assert not (c.base / "cluster.json").exists()


@pytest.mark.run_alone  # a broker restarted within its 4 s session: missed once beside other tests
def test_detached_cluster_and_clear_errors(make_cluster: MakeCluster) -> None:
    c = make_cluster(brokers=2)
    hint = f"start one with `dmq cluster start --data-dir {c.base}`"
    for args in (["stop"], ["kill", "--broker", "1"], ["start", "--broker", "1"]):
        res = c.cluster(*args)
        assert res.returncode == 1
        assert one_error_line(res) == f"error: no cluster is running in {c.base}; {hint}"

    res = c.run(*c.start_args(), "--detach")  # returns once ZooKeeper and the brokers listen
    assert res.returncode == 0, res.stderr
    assert "runs in the background" in res.stdout
    started = [cells for cells in table_rows(res.stdout) if len(cells) == 5]
    assert [c[0].strip() for c in started] == ["1", "2"], res.stdout  # broker, pid, listener, ...
    assert all(right_aligned(c[0]) and right_aligned(c[1]) for c in started), res.stdout
    assert len(processes_under(c.base)) == 3  # ZooKeeper and two brokers; the CLI has exited

    again = c.run(*c.start_args(), "--detach")
    assert again.returncode == 1 and "a cluster is already running in" in one_error_line(again)
    res = c.cluster("stop", "--broker", "4")
    assert res.returncode == 2
    assert one_error_line(res) == "error: broker 4 is not part of this cluster (brokers 1-2)"
    res = c.cluster("start", "--broker", "1")
    assert res.returncode == 1 and "error: broker 1 is already running (pid " in one_error_line(res)
    res = c.cluster("start", "--broker", "1", "--brokers", "5")
    assert res.returncode == 2 and "drop --brokers" in one_error_line(res)
    assert c.cluster("kill").returncode == 2  # --broker is required

    res = c.cluster("stop", "--broker", "2")
    assert res.returncode == 0, res.stderr
    for args in (["stop", "--broker", "2"], ["kill", "--broker", "2"]):
        res = c.cluster(*args)
        assert res.returncode == 1
        assert one_error_line(res) == (f"error: broker 2 is not running; start it with "
                                       f"`dmq cluster start --data-dir {c.base} --broker 2`")
    rows = broker_rows(c.cluster("status").stdout)
    assert rows[1][1].strip() == "running" and rows[2][1].strip().startswith("stopped")

    # Restarted at once after a crash, a broker registers only once its old session expired:
    # `start --broker` says so and returns when it has registered.
    assert c.cluster("kill", "--broker", "1").returncode == 0
    res = c.cluster("start", "--broker", "1")
    assert res.returncode == 0, res.stderr
    assert "still registered by an earlier session" in res.stdout
    assert 1 in c.admin([1]).list_topics(timeout=10).brokers
    # -b alone asks that cluster what it knows: registered brokers, no local pids
    remote = c.run("cluster", "status", "-b", f"127.0.0.1:{c.ports[1]}")
    assert remote.returncode == 0, remote.stderr
    assert "cluster in" not in remote.stdout
    assert [[cell.strip() for cell in row] for row in table_rows(remote.stdout) if len(row) == 5][:1] \
        == [["1", "running", "127.0.0.1", str(c.ports[1]), "controller"]], remote.stdout

    res = c.cluster("stop")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    order = [lines_matching(out, pattern) for pattern in
             ("broker 2 is already stopped", "broker 1 stopped", "ZooKeeper stopped")]
    assert all(len(found) == 1 for found in order) and order == sorted(order), out
    assert processes_under(c.base) == {}


def test_every_option_has_help_and_flags_show_no_bool_metavar() -> None:
    import typer.main

    from dmq.cli import cluster

    group: Any = typer.main.get_command(cluster.app)
    assert set(group.commands) == {"start", "stop", "kill", "status"}
    for name, command in group.commands.items():
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert param.help, f"dmq cluster {name} {param.opts[0]} has no help text"
                if param.is_flag and not param.secondary_opts:
                    assert param.metavar == "", f"dmq cluster {name} {param.opts[0]} shows <bool>"


def test_ctrl_c_while_starting_stops_what_was_started(make_cluster: MakeCluster) -> None:
    c = make_cluster(brokers=3)
    proc = c.start_foreground()
    c.wait_output("✓ broker 1 on")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(60) == 130, c.output()
    assert processes_under(c.base) == {}, c.output()
    out = c.output()
    assert lines_matching(out, r"broker 1 stopped") < lines_matching(out, "ZooKeeper stopped"), out
    assert not (c.base / "cluster.json").exists()


def test_zookeeper_dying_stops_the_cluster_and_leaves_nothing_behind(make_cluster: MakeCluster) -> None:
    c = make_cluster(brokers=1)
    proc = c.start_foreground()
    c.wait_output("bootstrap servers")
    zk_pid = json.loads((c.base / "cluster.json").read_text())["zookeeper"]["pid"]
    os.kill(zk_pid, signal.SIGKILL)
    assert proc.wait(60) == 1, c.output()
    assert "ZooKeeper exited (SIGKILL)" in c.output()
    assert processes_under(c.base) == {}, c.output()
