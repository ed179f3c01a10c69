from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import Cluster
from support.zookeeper import available


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    c = Cluster(tmp_path)
    try:
        yield c.start()
    finally:
        c.stop()
