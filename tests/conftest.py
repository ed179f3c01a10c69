from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.broker import BrokerProcess  # noqa: E402

# CLI tests press Ctrl-C (SIGINT) on dmq commands as a terminal does. A suite started in
# the background by a non-interactive shell (`./scripts/test.sh &`, some CI runners)
# inherits SIGINT ignored, and so would every dmq it starts: they never saw the Ctrl-C.
# Children get the disposition a terminal gives them.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by a test module (tests use their own topics)."""
    base = tmp_path_factory.mktemp("broker")
    # Groups form at once in tests; the broker's default waits 3 s like Kafka.
    proc = BrokerProcess(base / "data", overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    yield proc
    proc.close()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart or kill it."""
    proc = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    yield proc
    proc.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("[", "-").replace("]", "").replace(",", "-")
    return "t-" + "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:200]


# ------------------------------------------------------------------------ parallel runs
#
# scripts/test.sh runs the suite on pytest-xdist workers (``-n N --dist loadscope``):
#
# * a test module goes whole to one worker (its module-scoped servers start once), and so
#   do tests/spark (one SparkSession, and no two Spark jobs competing for the two cores)
#   and tests/chaos;
# * modules go out heaviest directories first, so that no long module starts last;
# * a test marked ``run_alone`` (timing-sensitive fault runs) runs with no other test
#   running beside it: other workers finish what they run, then wait until it is done.

HEAVY_FIRST = ("chaos", "spark", "cluster", "cli", "integration", "test_readme.py", "bench")
WHOLE_DIRECTORIES = ("chaos", "spark")
TESTS = Path(__file__).parent


def _directory(item: pytest.Item) -> str:
    try:
        return item.path.relative_to(TESTS).parts[0]
    except ValueError:
        return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("run_alone"):
            return 0
        d = _directory(item)
        return 1 + (HEAVY_FIRST.index(d) if d in HEAVY_FIRST else len(HEAVY_FIRST))

    items.sort(key=rank)  # stable: a module's tests keep their order, and stay together


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # keep the order above, not by number of tests

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            parts = path.split("/")
            if len(parts) >= 3 and parts[-3] == "tests" and parts[-2] in WHOLE_DIRECTORIES:
                return "/".join(parts[:-1])
            return path  # the module (loadscope alone would split classes apart)

    return ModuleScheduling(config, log)


_RUN_ALONE_DIR = "dmq_run_alone_dir"  # in a worker's workerinput: where the lock files are
_run_alone_dir = pytest.StashKey[str]()  # the controller's


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    config: pytest.Config = node.config
    if _run_alone_dir not in config.stash:
        config.stash[_run_alone_dir] = tempfile.mkdtemp(prefix="dmq-tests-")
    node.workerinput[_RUN_ALONE_DIR] = config.stash[_run_alone_dir]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _run_alone_dir in config.stash:
        shutil.rmtree(config.stash[_run_alone_dir], ignore_errors=True)


class _RunAloneLock:
    """A readers-writer lock over the workers of one run, with two flock(2)ed files: every
    test holds ``lock`` shared, a ``run_alone`` test holds it exclusively. ``gate`` is
    taken first by both, and held by a ``run_alone`` test while it waits and runs, so that
    tests keeping on starting elsewhere cannot hold it off."""

    def __init__(self, directory: str) -> None:
        self.gate = os.open(os.path.join(directory, "gate"), os.O_RDWR | os.O_CREAT, 0o600)
        self.lock = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self, alone: bool) -> None:
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        except BaseException:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
            raise
        if not alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)

    def release(self, alone: bool, next_alone: bool) -> None:
        """``next_alone``: this worker's next test runs alone too, and keeps the gate (no
        other test starts in between, for it to wait on)."""
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        if alone and not next_alone:
            fcntl.flock(self.gate, fcntl.LOCK_UN)


_run_alone_lock: _RunAloneLock | None = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    global _run_alone_lock
    directory = getattr(item.config, "workerinput", {}).get(_RUN_ALONE_DIR)
    if directory is None:  # not an xdist worker: nothing runs beside it anyway
        return (yield)
    if _run_alone_lock is None:
        _run_alone_lock = _RunAloneLock(directory)
    alone = item.get_closest_marker("run_alone") is not None
    _run_alone_lock.acquire(alone)
    try:
        return (yield)
    finally:
        _run_alone_lock.release(alone, nextitem is not None and nextitem.get_closest_marker("run_alone") is not None)
