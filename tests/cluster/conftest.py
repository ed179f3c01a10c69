from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster import Cluster
from support.zookeeper import available


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Three brokers and ZooKeeper; ``@pytest.mark.cluster_config(key="value")`` overrides configs."""
    if not available():
        pytest.skip("Debian's zookeeper package is not installed (scripts/test.sh installs it)")
    marker = request.node.get_closest_marker("cluster_config")
    c = Cluster(tmp_path, overrides=dict(marker.kwargs) if marker else None)
    try:
        yield c.start()
    finally:
        c.stop()
