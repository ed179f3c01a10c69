"""``dmq cluster``: run a local development cluster, and show any cluster's state.

``start`` runs Debian's ZooKeeper (Java 17) and N brokers on loopback, each in
a session of its own (so a terminal's Ctrl-C reaches only ``dmq cluster
start``, which then stops the brokers one by one with controlled shutdown and
ZooKeeper last). What runs is recorded in ``cluster.json`` in the cluster's
directory: pids, ports, data dirs, logs and command lines. Separate
invocations read it to stop (SIGTERM, controlled shutdown), kill (SIGKILL) or
restart one broker, or to stop the whole cluster, which is how failover is
tried: a broker exiting never takes the others down.

``status`` shows brokers (running or stopped, with pid and port, when the
cluster is the local one), the controller and every partition's leader,
replicas and ISR, flagging under-replicated and offline partitions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.markup import escape
from rich.text import Text

from dmq.cli.common import (
    CommandConfigOption,
    admin_client,
    cannot_reach,
    fail,
    kafka_error_text,
    list_topics,
    make_console,
    make_table,
    unreachable,
)
from dmq.cli.help import Typer
from dmq.cluster.metadata import INTERNAL_TOPICS

app = Typer(help="Run a local cluster and inspect clusters.", no_args_is_help=True)
console = make_console()

_MARKS = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "error": ("✗", "red")}


def say(message: str, mark: str | None = None, style: str | None = None) -> None:
    """One message line, taken literally (a path may hold brackets), never wrapped, after a
    coloured ✓, ! or ✗ for ``mark`` ok, warn or error."""
    text = Text()
    if mark is not None:
        symbol, colour = _MARKS[mark]
        text.append(f"{symbol} ", style=colour)
    text.append(message, style=style)
    console.print(text, soft_wrap=True, highlight=False)


ZK_JAR = "/usr/share/java/zookeeper.jar"
DEFAULT_DIR = "./dmq-cluster"
STATE_FILE = "cluster.json"
LOCK_FILE = ".cluster.lock"
STARTUP_TIMEOUT = 60.0
BROKER_STOP_TIMEOUT = 60.0
ZOOKEEPER_STOP_TIMEOUT = 20.0
KILL_WAIT = 10.0

DataDir = Annotated[str, typer.Option(
    "--data-dir", metavar="DIR",
    help=f"the cluster's directory: ZooKeeper's and the brokers' data and logs, and {STATE_FILE}, "
         "the running cluster's pids and ports")]
Timeout = Annotated[float, typer.Option(
    "--timeout", metavar="SECONDS", min=0,
    help="seconds to wait for a broker's controlled shutdown before killing it")]


class _ProcessFailed(Exception):
    """A process exited or did not listen while starting, or would not die; the message says
    which and where its log is."""


class _Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP arrived while starting."""


# ------------------------------------------------------------------ processes


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` is still the process that was started (not a zombie, not a reused pid)."""
    if not os.path.exists("/proc/self/stat"):  # no procfs: trust the pid
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    st = _stat(pid)
    return st is not None and st[0] not in "ZX" and (start_time is None or st[1] == start_time)


_children: dict[int, subprocess.Popen[bytes]] = {}


def _reap() -> None:
    """Collect the exit status of children of this process that have exited."""
    for proc in _children.values():
        proc.poll()


def _exit_code(pid: int | None, wait: float = 2.0) -> int | None:
    """The exit status of a child of this process that is no longer running; None if it is
    not our child. Waits up to ``wait`` seconds: a SIGKILLed JVM's main thread is a zombie
    (so not running) while its other threads are still exiting, and until they are gone
    the kernel has no exit status to give (seen as "ZooKeeper exited" without the signal)."""
    proc = _children.get(pid) if pid is not None else None
    if proc is None:
        return None
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        return None


def _describe_exit(code: int | None) -> str:
    if code is None:
        return ""
    if code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return f" (signal {-code})"
    return f" (exit code {code})"


@dataclass
class Member:
    """ZooKeeper or one broker: how it is started, and the process that runs it."""

    name: str
    port: int
    command: list[str]
    log: str
    data_dir: str
    pid: int | None = None
    start_time: int | None = None  # tells the process from a later one given the same pid

    def running(self) -> bool:
        return self.pid is not None and _alive(self.pid, self.start_time)

    def launch(self) -> int:
        """Start it in a session of its own (a terminal's Ctrl-C does not reach it); returns
        the size its log had, where this run's lines begin."""
        try:
            offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            with open(self.log, "ab") as out:
                proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=out, start_new_session=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as e:
            raise _ProcessFailed(f"cannot start {self.name}: {self.command[0]}: {e.strerror}") from None
        _children[proc.pid] = proc
        st = _stat(proc.pid)
        self.pid, self.start_time = proc.pid, st[1] if st else None
        return offset

    def wait_ready(self, interrupted: Callable[[], bool], log_offset: int | None = None,
                   timeout: float = STARTUP_TIMEOUT) -> None:
        """Until it accepts connections on its port, and (a broker, given ``log_offset``) has
        logged that it listens: that is after it registered, which a broker restarted soon
        after a crash does only once its previous ZooKeeper session has expired."""
        deadline = time.monotonic() + timeout
        told = False
        while time.monotonic() < deadline:
            if interrupted():
                raise _Interrupted
            _reap()
            if not self.running():
                raise _ProcessFailed(f"{self.name} exited while starting"
                                     f"{_describe_exit(_exit_code(self.pid))}; see {self.log}")
            text = _read_from(self.log, log_offset) if log_offset is not None else ""
            if not told and "still registered by an earlier session" in text:
                line = next(ln for ln in text.splitlines() if "still registered by an earlier" in ln)
                say(line.split(": ", 1)[-1], mark="warn")
                told = True
            if log_offset is None or "listening on" in text:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), 0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise _ProcessFailed(f"{self.name} did not come up on 127.0.0.1:{self.port} within "
                             f"{timeout:.0f}s; see {self.log}")

    def terminate(self, sig: signal.Signals, timeout: float,
                  forced: Callable[[], bool] = lambda: False) -> bool:
        """Send ``sig`` and wait until it exits; SIGKILL it after ``timeout`` seconds or once
        ``forced()``. True if it exited without needing SIGKILL (or was sent SIGKILL to begin with)."""
        assert self.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        deadline = time.monotonic() + timeout
        clean = True
        while True:
            _reap()
            if not self.running():
                return clean
            if clean and sig != signal.SIGKILL and (time.monotonic() > deadline or forced()):
                clean = False
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                deadline = time.monotonic() + KILL_WAIT
            elif time.monotonic() > deadline + (KILL_WAIT if clean else 0):
                raise _ProcessFailed(f"{self.name} (pid {self.pid}) is still there after SIGKILL")
            time.sleep(0.05)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- state


@dataclass
class ClusterState:
    """What ``cluster.json`` records about the cluster running in ``base``."""

    base: Path
    zookeeper: Member
    brokers: dict[int, Member]
    supervisor: int | None = None  # the foreground ``dmq cluster start``, if any
    stopping: bool = False

    @property
    def path(self) -> Path:
        return self.base / STATE_FILE

    def save(self) -> None:
        data = {"version": 1, "supervisor": self.supervisor, "stopping": self.stopping,
                "zookeeper": asdict(self.zookeeper),
                "brokers": {str(i): asdict(m) for i, m in sorted(self.brokers.items())}}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, base: Path) -> ClusterState | None:
        path = base / STATE_FILE
        try:
            data = json.loads(path.read_text())
            return cls(base, Member(**data["zookeeper"]),
                       {int(i): Member(**m) for i, m in data["brokers"].items()},
                       data.get("supervisor"), bool(data.get("stopping")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"cannot read {path} ({e}); if no cluster runs there, remove it")

    def running(self) -> bool:
        return self.zookeeper.running() or any(m.running() for m in self.brokers.values())

    def ids(self) -> str:
        ids = sorted(self.brokers)
        if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1:
            return f"brokers {ids[0]}-{ids[-1]}"
        return ("broker " if len(ids) == 1 else "brokers ") + ", ".join(map(str, ids))

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{m.port}" for _, m in sorted(self.brokers.items()) if m.running())


def _hint(command: str, base: Path) -> str:
    """``dmq cluster COMMAND``, with ``--data-dir`` when ``base`` is not the default."""
    if base == Path(DEFAULT_DIR).resolve():
        return f"dmq cluster {command}"
    return f"dmq cluster {command} --data-dir {shlex.quote(str(base))}"


@contextlib.contextmanager
def _locked(base: Path, wait: float = 10.0) -> Iterator[None]:
    """One ``dmq cluster`` command at a time changes the cluster in ``base`` (if it exists:
    if not, there is no cluster to change)."""
    if not base.is_dir():
        yield
        return
    import fcntl  # POSIX only, like the rest of running a cluster; `dmq` itself imports this module

    fd = os.open(base / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    fail(f"another `dmq cluster` command is changing the cluster in {base}; "
                         "try again when it is done")
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def _running_cluster(base: Path) -> ClusterState:
    """The cluster running in ``base`` (call with the lock held), or exit 1 saying there is none."""
    state = ClusterState.load(base) if base.is_dir() else None
    if state is not None and not state.running():
        state.path.unlink(missing_ok=True)  # every process of it is gone: stale
        state = None
    if state is None:
        fail(f"no cluster is running in {base}; start one with `{_hint('start', base)}`")
    return state


def _member(state: ClusterState, broker: int) -> Member:
    if broker not in state.brokers:
        fail(f"broker {broker} is not part of this cluster ({state.ids()})", 2)
    return state.brokers[broker]


# ------------------------------------------------------------------- stopping


def _read_from(log: str, offset: int) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _shutdown_report(log: str, offset: int) -> tuple[bool, str]:
    """(controlled shutdown completed, what the broker logged about it) from its log past ``offset``."""
    text = _read_from(log, offset)
    said = [line.split(": ", 1)[-1] for line in text.splitlines() if "controlled shutdown" in line]
    if not said:
        return True, "shut down cleanly" if "shut down cleanly" in text else ""
    return "leadership moved away" in said[-1], said[-1]


def _stop_broker(broker: int, m: Member, timeout: float, forced: Callable[[], bool] = lambda: False) -> bool:
    """SIGTERM (the broker's controlled shutdown) and wait; True if it stopped without SIGKILL."""
    offset = os.path.getsize(m.log) if os.path.exists(m.log) else 0
    say(f"stopping broker {broker} (pid {m.pid}, controlled shutdown) ...")
    clean = m.terminate(signal.SIGTERM, timeout, forced)
    if not clean:
        say(f"broker {broker} did not stop within {timeout:.0f}s; killed it (SIGKILL); "
            f"see {m.log}", mark="error")
        return False
    ok, said = _shutdown_report(m.log, offset)
    if ok:
        say(f"broker {broker} stopped" + (f" ({said})" if said else ""), mark="ok")
    else:
        say(f"broker {broker} stopped, but {said}; see {m.log}", mark="warn")
    return True


def _controller(state: ClusterState) -> int | None:
    bootstrap = state.bootstrap()
    if not bootstrap:
        return None
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000,
                          "log_level": 2}).list_topics(timeout=5)
        return int(md.controller_id) if md.controller_id >= 0 else None
    except Exception:  # noqa: BLE001 - only orders the shutdown; any order works
        return None


def _stop_cluster(state: ClusterState, timeout: float, forced: Callable[[], bool] = lambda: False) -> bool:
    """Brokers one by one with controlled shutdown (the controller last, so the controller
    moves once), then ZooKeeper. Call with the lock held. True if nothing needed SIGKILL."""
    state.stopping = True
    state.save()
    controller = _controller(state)
    order = sorted(state.brokers, key=lambda i: (i == controller, i))
    clean = True
    for broker in order:
        m = state.brokers[broker]
        if m.pid is None:  # never started (the start was interrupted or failed before it)
            continue
        if not m.running():
            say(f"broker {broker} is already stopped")
            continue
        if forced():
            say(f"killing broker {broker} (pid {m.pid}) ...")
            m.terminate(signal.SIGKILL, KILL_WAIT)
            clean = False
            continue
        clean = _stop_broker(broker, m, timeout, forced) and clean
    zk = state.zookeeper
    if zk.running():
        say(f"stopping ZooKeeper (pid {zk.pid}) ...")
        if zk.terminate(signal.SIGTERM, ZOOKEEPER_STOP_TIMEOUT, forced):
            say("ZooKeeper stopped", mark="ok")
        else:
            say(f"ZooKeeper did not stop; killed it (SIGKILL); see {zk.log}", mark="error")
            clean = False
    elif zk.pid is not None:
        say("ZooKeeper is already stopped")
    state.path.unlink(missing_ok=True)
    say("cluster stopped" if clean else "cluster stopped (some processes were killed)")
    return clean


class _Signals:
    """Ctrl-C (SIGINT), SIGTERM and SIGHUP, counted rather than raised, so that the
    supervisor stops the cluster in order wherever it was when one arrived."""

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> _Signals:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # SIGHUP: the terminal closed
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count > 1:
            say("interrupted again: killing what is left")

    def after(self, seen: int) -> Callable[[], bool]:
        return lambda: self.count > seen


# ------------------------------------------------------------------- starting


def _zookeeper_member(base: Path, port: int) -> Member:
    zk_dir = base / "zookeeper"
    (zk_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = zk_dir / "zoo.cfg"
    cfg.write_text(f"tickTime=2000\ndataDir={zk_dir / 'data'}\nclientPort={port}\n"
                   "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                   "maxSessionTimeout=60000\n4lw.commands.whitelist=ruok,stat\n")
    command = ["java", "-Xmx256m", "-cp", f"/etc/zookeeper/conf:{ZK_JAR}",
               f"-Dzookeeper.log.dir={zk_dir}", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
               str(cfg)]
    return Member("ZooKeeper", port, command, str(zk_dir / "zookeeper.log"), str(zk_dir))


def _broker_member(base: Path, broker: int, port: int, zk_port: int, overrides: list[str]) -> Member:
    data = base / f"broker-{broker}"
    command = [sys.executable, "-m", "dmq", "server", "--broker-id", str(broker),
               "--zookeeper", f"127.0.0.1:{zk_port}/dmq", "--listen", f"127.0.0.1:{port}",
               "--data-dir", str(data)]
    for item in overrides:
        command += ["--override", item]
    return Member(f"broker {broker}", port, command, str(base / f"broker-{broker}.log"), str(data))


def _plan(base: Path, brokers: int, base_port: int, zookeeper_port: int,
          overrides: list[str]) -> ClusterState:
    zk_port = zookeeper_port or _free_port()
    ports = {i: (base_port + i - 1 if base_port else _free_port()) for i in range(1, brokers + 1)}
    for what, port in [("ZooKeeper (--zookeeper-port)", zk_port)] + [
            (f"broker {i} (--base-port)", p) for i, p in ports.items()]:
        if not _port_free(port):
            fail(f"port {port} for {what} is in use on 127.0.0.1; choose free ports with "
                 "--base-port and --zookeeper-port")
    return ClusterState(base, _zookeeper_member(base, zk_port),
                        {i: _broker_member(base, i, p, zk_port, overrides) for i, p in ports.items()})


def _launch_all(state: ClusterState, interrupted: Callable[[], bool]) -> None:
    zk = state.zookeeper
    with console.status(f"starting ZooKeeper on 127.0.0.1:{zk.port} ..."):
        zk.launch()
        state.save()
        zk.wait_ready(interrupted)
    say(f"ZooKeeper on 127.0.0.1:{zk.port} (pid {zk.pid})", mark="ok")
    for i, m in sorted(state.brokers.items()):
        with console.status(f"starting broker {i} on 127.0.0.1:{m.port} ..."):
            offset = m.launch()
            state.save()
            m.wait_ready(interrupted, offset)
        say(f"broker {i} on 127.0.0.1:{m.port} (pid {m.pid})", mark="ok")


def _relative(path: str, base: Path) -> str:
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return path


def _print_started(state: ClusterState, detach: bool) -> None:
    say(f"dmq development cluster in {state.base}")
    table = make_table("broker", "pid", "listener", "data dir", "log", numbers=("broker", "pid"))
    for i, m in sorted(state.brokers.items()):
        table.add_row(str(i), str(m.pid), f"127.0.0.1:{m.port}",
                      escape(_relative(m.data_dir, state.base)), escape(_relative(m.log, state.base)))
    console.print(table)
    say(f"bootstrap servers: {state.bootstrap()}   "
        f"ZooKeeper: 127.0.0.1:{state.zookeeper.port}/dmq")
    say(f"state: {state.path}")
    say(f"status: {_hint('status', state.base)}")
    say(f"one broker: {_hint('stop|kill|start', state.base)} --broker N")
    if detach:
        say(f"the cluster runs in the background; stop it with `{_hint('stop', state.base)}`")
    else:
        say("Ctrl-C stops the cluster: the brokers one by one (controlled shutdown), "
            "then ZooKeeper")


def _supervise(state: ClusterState, signals: _Signals) -> None:
    """Report brokers stopping and starting again until a signal (then stop the cluster in
    order) or until another ``dmq cluster stop`` has stopped it; a broker exiting is reported,
    never a reason to stop the others."""
    base = state.base
    seen = {i: (m.pid, m.running()) for i, m in state.brokers.items()}
    while True:
        if signals.count:
            say("stopping the cluster: brokers one by one (controlled shutdown), then "
                "ZooKeeper; Ctrl-C again kills them instead")
            handled = signals.count
            with _locked(base, wait=BROKER_STOP_TIMEOUT * len(state.brokers)):
                current = ClusterState.load(base)
                if current is None:
                    say("cluster stopped")
                    raise SystemExit(0)
                clean = _stop_cluster(current, BROKER_STOP_TIMEOUT, signals.after(handled))
            raise SystemExit(0 if clean else 1)
        _reap()
        current = ClusterState.load(base)
        if current is None or current.stopping:
            if current is None or not current.running():
                say("cluster stopped (by `dmq cluster stop`)")
                raise SystemExit(0)
            time.sleep(0.2)
            continue
        for i, m in sorted(current.brokers.items()):
            now = (m.pid, m.running())
            if now == seen.get(i):
                continue
            if now[1]:
                say(f"broker {i} is running again (pid {m.pid})")
            else:
                code = _exit_code(m.pid)
                say(f"broker {i} exited{_describe_exit(code)}; the others keep running; restart "
                    f"it with `{_hint('start', base)} --broker {i}`"
                    + (f"; see {m.log}" if code is not None and code > 0 else ""), style="yellow")
            seen[i] = now
        if not current.zookeeper.running():
            say(f"ZooKeeper exited{_describe_exit(_exit_code(current.zookeeper.pid))}; see "
                f"{current.zookeeper.log}. Stopping the brokers.", style="red")
            with _locked(base, wait=BROKER_STOP_TIMEOUT):
                _stop_cluster(current, BROKER_STOP_TIMEOUT, signals.after(signals.count))
            raise SystemExit(1)
        time.sleep(0.2)


def _restart_broker(base: Path, broker: int) -> None:
    with _locked(base):
        state = _running_cluster(base)
        m = _member(state, broker)
        if state.stopping:
            fail(f"the cluster in {base} is being stopped")
        if m.running():
            fail(f"broker {broker} is already running (pid {m.pid})")
        if not state.zookeeper.running():
            fail(f"ZooKeeper of the cluster in {base} is not running, so broker {broker} cannot "
                 f"join; stop the cluster with `{_hint('stop', base)}` and start it again")
        if not _port_free(m.port):
            fail(f"port {m.port} of broker {broker} is in use by another process")
        try:
            with console.status(f"starting broker {broker} on 127.0.0.1:{m.port} ..."):
                offset = m.launch()
                state.save()
                m.wait_ready(lambda: False, offset)
        except _ProcessFailed as e:
            state.save()
            fail(str(e))
        except KeyboardInterrupt:
            fail(f"interrupted; broker {broker} (pid {m.pid}) goes on starting; see {m.log}", 130)
    say(f"broker {broker} started again on 127.0.0.1:{m.port} "
        f"(pid {m.pid}, same config and data dir {m.data_dir}); log: {m.log}", mark="ok")


# ------------------------------------------------------------------- commands


def _given(ctx: typer.Context, name: str) -> str:
    """Where an option's value came from: COMMANDLINE, ENVIRONMENT or DEFAULT."""
    return getattr(ctx.get_parameter_source(name), "name", "DEFAULT")


@app.command()
def start(
    ctx: typer.Context,
    brokers: Annotated[int, typer.Option(
        "--brokers", "-n", metavar="N", help="number of brokers")] = 3,
    data_dir: DataDir = DEFAULT_DIR,
    base_port: Annotated[int, typer.Option(
        "--base-port", metavar="PORT", min=0, max=65535,
        help="broker i listens on 127.0.0.1:(base-port + i - 1); 0 picks free ports")] = 9092,
    zookeeper_port: Annotated[int, typer.Option(
        "--zookeeper-port", metavar="PORT", min=0, max=65535,
        help="ZooKeeper's client port on 127.0.0.1; 0 picks a free one")] = 2181,
    override: Annotated[list[str] | None, typer.Option(
        "--override", metavar="KEY=VALUE",
        help="key=value broker config for every broker, repeatable")] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", metavar="",
        help="start the cluster in the background and return; `dmq cluster stop` stops it")] = False,
    broker: Annotated[int | None, typer.Option(
        "--broker", metavar="N",
        help="restart this stopped broker of the running cluster, with the command line and "
             "data dir it had")] = None,
) -> None:
    """Run ZooKeeper and N brokers on loopback until Ctrl-C (or in the background with
    --detach); with --broker N, restart one broker of the running cluster."""
    base = Path(data_dir).resolve()
    if broker is not None:
        given = [f"--{name.replace('_', '-')}" for name in
                 ("brokers", "base_port", "zookeeper_port", "override", "detach")
                 if _given(ctx, name) != "DEFAULT"]
        if given:
            fail(f"--broker restarts one broker with the config it was started with; "
                 f"drop {', '.join(given)}", 2)
        _restart_broker(base, broker)
        return
    if brokers < 1:
        fail("--brokers must be at least 1", 2)
    if base_port and base_port + brokers - 1 > 65535:
        fail(f"--base-port {base_port} leaves no port for broker {brokers}", 2)
    for item in override or []:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            fail(f"--override expects key=value, got {item!r}", 2)
    if not os.path.exists(ZK_JAR):
        fail("ZooKeeper is not installed: run `apt-get install -y zookeeper` (Debian) first")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"cannot create {base}: {e.strerror}")
    signals = _Signals().install()
    with _locked(base):
        existing = ClusterState.load(base)
        if existing is not None and existing.running():
            fail(f"a cluster is already running in {base} ({existing.ids()}); stop it with "
                 f"`{_hint('stop', base)}`, or use another --data-dir")
        state = _plan(base, brokers, base_port, zookeeper_port, list(override or []))
        state.supervisor = None if detach else os.getpid()
        state.save()
        try:
            _launch_all(state, signals.after(0))
        except (_ProcessFailed, _Interrupted) as e:
            if isinstance(e, _ProcessFailed):
                print(f"error: {e}", file=sys.stderr)
            say("stopping what was started ...")
            _stop_cluster(state, BROKER_STOP_TIMEOUT, signals.after(signals.count))
            raise SystemExit(130 if isinstance(e, _Interrupted) else 1) from None
    _print_started(state, detach)
    if not detach:
        _supervise(state, signals)


@app.command()
def stop(
    data_dir: DataDir = DEFAULT_DIR,
    broker: Annotated[int | None, typer.Option(
        "--broker", metavar="N", help="stop only this broker (SIGTERM: a controlled shutdown moves its "
                         "leadership away first); the others keep running")] = None,
    timeout: Timeout = BROKER_STOP_TIMEOUT,
) -> None:
    """Stop the cluster (the brokers one by one with controlled shutdown, then ZooKeeper),
    or with --broker N one broker."""
    base = Path(data_dir).resolve()
    signals = _Signals().install()
    with _locked(base):
        state = _running_cluster(base)
        try:
            if broker is None:
                clean = _stop_cluster(state, timeout, signals.after(0))
            else:
                m = _member(state, broker)
                if not m.running():
                    fail(f"broker {broker} is not running; start it with "
                         f"`{_hint('start', base)} --broker {broker}`")
                clean = _stop_broker(broker, m, timeout, signals.after(0))
        except _ProcessFailed as e:
            fail(str(e))
    raise SystemExit(0 if clean else 1)


@app.command()
def kill(
    broker: Annotated[int, typer.Option(
        "--broker", metavar="N", help="the broker to kill (SIGKILL: a crash; its partitions fail over once "
                         "its ZooKeeper session expires)")],
    data_dir: DataDir = DEFAULT_DIR,
) -> None:
    """Kill one broker with SIGKILL, as a crash would; the others keep running."""
    base = Path(data_dir).resolve()
    with _locked(base):
        state = _running_cluster(base)
        m = _member(state, broker)
        if not m.running():
            fail(f"broker {broker} is not running; start it with `{_hint('start', base)} --broker {broker}`")
        pid = m.pid
        try:
            m.terminate(signal.SIGKILL, KILL_WAIT)
        except _ProcessFailed as e:
            fail(str(e))
    say(f"broker {broker} killed (SIGKILL, pid {pid}); its partitions move to other "
        f"replicas once its ZooKeeper session expires; restart it with "
        f"`{_hint('start', base)} --broker {broker}`")


def _state_for_status(base: Path) -> ClusterState | None:
    state = ClusterState.load(base) if (base / STATE_FILE).exists() else None
    return state if state is not None and state.running() else None


@app.command()
def status(
    ctx: typer.Context,
    data_dir: DataDir = DEFAULT_DIR,
    bootstrap_server: Annotated[str | None, typer.Option(
        "--bootstrap-server", "-b", envvar="DMQ_BOOTSTRAP_SERVER", metavar="HOST:PORT",
        help="broker to ask [default: the running brokers of the cluster in "
             "--data-dir, else 127.0.0.1:9092]")] = None,
    include_internal: Annotated[bool, typer.Option(
        "--include-internal", metavar="", help="also list internal topics' partitions (__consumer_offsets)")] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Brokers (running or stopped, with pid and port, for the local cluster), the controller,
    and every partition's leader, replicas and ISR."""
    base = Path(data_dir).resolve()
    # -b on the command line asks about that cluster: the local one only with --data-dir too.
    remote = _given(ctx, "bootstrap_server") == "COMMANDLINE" and _given(ctx, "data_dir") == "DEFAULT"
    state = None if remote else _state_for_status(base)
    if state is not None:
        zk = state.zookeeper
        say(f"cluster in {base}: ZooKeeper 127.0.0.1:{zk.port} "
            + (f"running (pid {zk.pid})" if zk.running() else "stopped"))
    if state is not None and _given(ctx, "bootstrap_server") != "COMMANDLINE":
        bootstrap = state.bootstrap()
    else:
        bootstrap = bootstrap_server or "127.0.0.1:9092"
    md = None
    error = ""
    if bootstrap:
        # Asked before the client is made: with no local cluster, the answer says so.
        reasons = unreachable(bootstrap)
        if reasons and state is None and not remote:
            fail(f"no cluster is running in {base}, and nothing answers at {bootstrap} "
                 f"({'; '.join(reasons)}); start one with `{_hint('start', base)}`, or pass "
                 f"--bootstrap-server HOST:PORT")
        if reasons:
            cannot_reach(bootstrap, reasons)
        admin = admin_client(bootstrap)
        try:
            md = list_topics(admin)
        except KafkaException as e:
            error = f"cannot read the cluster's metadata from {bootstrap}: {kafka_error_text(e)}"
            if state is None and not remote:
                error += f" (and no cluster is running in {base})"
    else:
        error = (f"no broker of the cluster in {base} is running; start one with "
                 f"`{_hint('start', base)} --broker N`")
    # Killed brokers stay registered until their ZooKeeper session expires: show them as down.
    stopped = {i for i, m in state.brokers.items() if not m.running()} if state is not None else set()
    if state is not None or md is not None:
        _print_brokers(state, md, stopped)
    if md is None:
        fail(error)
    _print_partitions(md, include_internal, stopped)


def _print_brokers(state: ClusterState | None, md: Any, stopped: set[int]) -> None:
    registered = dict(md.brokers) if md is not None else {}
    controller = md.controller_id if md is not None else -1
    cols = ["broker", "state"] + (["pid"] if state is not None else []) + ["host", "port", "role"]
    table = make_table(*cols, numbers=("broker", "pid", "port"),
                       title="brokers" + (f" (cluster {md.cluster_id})" if md is not None else ""))
    local = state.brokers if state is not None else {}
    for bid in sorted(set(local) | set(registered)):
        m, b = local.get(bid), registered.get(bid)
        if bid in stopped:
            run = "[red]stopped[/red]" + (" (still registered)" if b is not None else "")
        elif m is not None and md is not None and b is None:
            run = "[yellow]running, not registered[/yellow]"
        else:
            run = "running"
        row = [str(bid), run]
        if state is not None:
            row.append(str(m.pid) if m is not None and bid not in stopped else "-")
        row += [escape(b.host) if b is not None else "127.0.0.1",
                str(b.port if b is not None else m.port if m is not None else ""),
                "controller" if bid == controller else ""]
        table.add_row(*row)
    console.print(table)


def _print_partitions(md: Any, include_internal: bool, stopped: set[int]) -> None:
    live = set(md.brokers) - stopped
    parts = make_table("topic", "partition", "leader", "replicas", "isr", "status",
                       numbers=("partition", "leader"), title="partitions")
    counts = {"under-replicated": 0, "awaiting failover": 0, "offline": 0}
    hidden = hidden_bad = 0
    for name in sorted(md.topics):
        for pid, p in sorted(md.topics[name].partitions.items()):
            missing = [r for r in p.replicas if r not in live]
            if p.leader < 0:
                kind, state = "offline", "[red]offline[/red]"
            elif p.leader in stopped:
                kind, state = "awaiting failover", "[red]leader stopped, failover pending[/red]"
            elif len(p.isrs) < len(p.replicas) or missing:
                kind, state = "under-replicated", "[yellow]under-replicated[/yellow]"
            else:
                kind, state = "", "ok"
            if name in INTERNAL_TOPICS and not include_internal:
                hidden += 1
                hidden_bad += bool(kind)
                continue
            if kind:
                counts[kind] += 1
            if missing:
                state += f" (down: {','.join(map(str, missing))})"
            parts.add_row(name, str(pid), str(p.leader), ",".join(map(str, p.replicas)),
                          ",".join(map(str, p.isrs)), state)
    console.print(parts)
    stale = sorted(stopped & set(md.brokers))
    summary = (f"{len(md.brokers)} broker{'' if len(md.brokers) == 1 else 's'} registered"
               + (f" (stopped but registered until {'its' if len(stale) == 1 else 'their'} "
                  f"ZooKeeper session expires: {', '.join(map(str, stale))})" if stale else "")
               + f", controller {md.controller_id}; "
               + ", ".join(f"{n} {kind}" for kind, n in counts.items()
                           if n or kind != "awaiting failover") + " partitions")
    if hidden:
        summary += (f"; {hidden} partitions of internal topics not shown"
                    + (f" ({hidden_bad} not ok)" if hidden_bad else "") + " (--include-internal)")
    console.print(Text(summary), highlight=False)  # wrapped between words, unlike say()
