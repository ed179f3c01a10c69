"""``dmq cluster``: run a local development cluster, and show any cluster's state.

``start`` runs Debian's ZooKeeper (Java 17) and N brokers on loopback, all as
child processes with their logs in the data directory, until Ctrl-C (which
shuts the brokers down cleanly, with controlled shutdown, then ZooKeeper).
``status`` shows brokers, the controller and every partition's leader,
replicas and ISR, flagging under-replicated and offline partitions.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import KafkaException
from rich.table import Table

from dmq.cli.common import ADMIN_TIMEOUT, Bootstrap, admin_client, fail, make_console

app = typer.Typer(help="Run a local cluster and inspect clusters.", no_args_is_help=True)
console = make_console()

ZK_JAR = "/usr/share/java/zookeeper.jar"


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"{what} exited with code {proc.returncode}; see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.2)
    fail(f"{what} did not listen on port {port} within {timeout:.0f}s; see {log}")


def _start_zookeeper(base: Path, port: int) -> subprocess.Popen[bytes]:
    if not os.path.exists(ZK_JAR):
        fail("ZooKeeper is not installed: run `apt-get install -y zookeeper` (Debian) first")
    zk_dir = base / "zookeeper"
    (zk_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = zk_dir / "zoo.cfg"
    cfg.write_text(f"tickTime=2000\ndataDir={zk_dir / 'data'}\nclientPort={port}\n"
                   "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                   "maxSessionTimeout=60000\n4lw.commands.whitelist=ruok,stat\n")
    log = zk_dir / "zookeeper.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", f"/etc/zookeeper/conf:{ZK_JAR}", f"-Dzookeeper.log.dir={zk_dir}",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdout=out, stderr=out)
    _wait_port(port, proc, "ZooKeeper", log)
    return proc


@app.command()
def start(
    brokers: Annotated[int, typer.Option("--brokers", "-n", help="number of brokers")] = 3,
    data_dir: Annotated[str, typer.Option("--data-dir", help="where ZooKeeper and the brokers keep data and logs")] = "./dmq-cluster",
    base_port: Annotated[int, typer.Option("--base-port", help="broker i listens on base-port + i - 1")] = 9092,
    zookeeper_port: Annotated[int, typer.Option("--zookeeper-port")] = 2181,
    override: Annotated[list[str] | None, typer.Option("--override", help="key=value broker config for every broker, repeatable")] = None,
) -> None:
    """Run ZooKeeper and N brokers on loopback until Ctrl-C."""
    if brokers < 1:
        fail("--brokers must be at least 1", 2)
    base = Path(data_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def stop_all(*_: object) -> None:
        console.print("stopping brokers (controlled shutdown) ...")
        for name, proc in reversed(children):
            if name != "zookeeper" and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in children:
            if name != "zookeeper":
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for name, proc in children:
            if name == "zookeeper" and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        console.print("cluster stopped")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop_all)
    try:
        with console.status(f"starting ZooKeeper on 127.0.0.1:{zookeeper_port} ..."):
            children.append(("zookeeper", _start_zookeeper(base, zookeeper_port)))
        console.print(f"[green]✓[/green] ZooKeeper on 127.0.0.1:{zookeeper_port}")
        connect = f"127.0.0.1:{zookeeper_port}/dmq"
        table = Table(title="dmq development cluster")
        for col in ("broker", "listener", "data dir", "log"):
            table.add_column(col)
        for i in range(1, brokers + 1):
            port = base_port + i - 1
            log = base / f"broker-{i}.log"
            cmd = [sys.executable, "-m", "dmq", "server", "--broker-id", str(i), "--zookeeper", connect,
                   "--listen", f"127.0.0.1:{port}", "--data-dir", str(base / f"broker-{i}")]
            for item in override or []:
                cmd += ["--override", item]
            with console.status(f"starting broker {i} on 127.0.0.1:{port} ..."), open(log, "ab") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=out)
                children.append((f"broker-{i}", proc))
                _wait_port(port, proc, f"broker {i}", log)
            console.print(f"[green]✓[/green] broker {i} on 127.0.0.1:{port}")
            table.add_row(str(i), f"127.0.0.1:{port}", str(base / f"broker-{i}"), str(log))
        console.print(table)
        bootstrap = ",".join(f"127.0.0.1:{base_port + i}" for i in range(brokers))
        console.print(f"bootstrap servers: [bold]{bootstrap}[/bold]   ZooKeeper: {connect}")
        console.print(f"try: dmq cluster status -b {bootstrap}    (Ctrl-C stops the cluster)")
        while True:
            for name, proc in children:
                if proc.poll() is not None:
                    console.print(f"[red]{name} exited with code {proc.returncode}[/red]; see its log in {base}")
                    stop_all()
            time.sleep(1)
    except KeyboardInterrupt:
        stop_all()
    except SystemExit:
        for _, proc in children:
            if proc.poll() is None:
                proc.kill()
        raise


@app.command()
def status(bootstrap_server: Bootstrap = "127.0.0.1:9092") -> None:
    """Brokers, the controller, and every partition's leader, replicas and ISR."""
    admin = admin_client(bootstrap_server)
    try:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT)
    except KafkaException as e:
        fail(f"cannot reach {bootstrap_server}: {e.args[0].str()}")
    live = set(md.brokers)
    brokers = Table(title=f"brokers (cluster {md.cluster_id})")
    for col in ("id", "host", "port", "role"):
        brokers.add_column(col, justify="right" if col in ("id", "port") else "left")
    for bid in sorted(md.brokers):
        b = md.brokers[bid]
        brokers.add_row(str(bid), b.host, str(b.port), "controller" if bid == md.controller_id else "")
    console.print(brokers)
    parts = Table(title="partitions")
    for col in ("topic", "partition", "leader", "replicas", "isr", "status"):
        parts.add_column(col, justify="right" if col in ("partition", "leader") else "left")
    under = offline = 0
    for name in sorted(md.topics):
        for pid, p in sorted(md.topics[name].partitions.items()):
            missing = [r for r in p.replicas if r not in live]
            if p.leader < 0:
                state, offline = "[red]offline[/red]", offline + 1
            elif len(p.isrs) < len(p.replicas):
                state, under = "[yellow]under-replicated[/yellow]", under + 1
            else:
                state = "ok"
            if missing:
                state += f" (down: {','.join(map(str, missing))})"
            parts.add_row(name, str(pid), str(p.leader), ",".join(map(str, p.replicas)),
                          ",".join(map(str, p.isrs)), state)
    console.print(parts)
    console.print(f"{len(live)} brokers, controller {md.controller_id}; "
                  f"{under} under-replicated, {offline} offline partitions")
