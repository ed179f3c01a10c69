from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

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
