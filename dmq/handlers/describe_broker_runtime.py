"""DescribeBrokerRuntime (dmq's extension 10004): when this broker started, how its
metadata is kept and, in a cluster, the state of its ZooKeeper session.

The web console's cluster page shows it per broker ("up since", ZooKeeper state); Kafka
has no API for either. Not advertised in ApiVersions: only dmq's tools send it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.handlers.authorize import AclOperation, authorize
from dmq.handlers.context import NO_THROTTLE, BrokerServices, RequestContext
from dmq.protocol.codec import make
from dmq.protocol.extensions import DESCRIBE_BROKER_RUNTIME_KEY

API_KEY = DESCRIBE_BROKER_RUNTIME_KEY
MIN_VERSION = 0
MAX_VERSION = 0
ADVERTISED = False


def _dmq_version() -> str:
    try:
        return version("dmq")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


VERSION = _dmq_version()


async def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    if not authorize(services, ctx, AclOperation.DESCRIBE):  # as DescribeLogDirs: Describe on the cluster
        return make(ctx.schema.DescribeBrokerRuntimeResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, broker_id=services.broker_id,
                    start_time_ms=0, metadata_mode="", version="")
    store = services.metadata
    # The ZooKeeper store has a session (its client); the embedded store has none.
    client = getattr(store, "client", None)
    zk_state: str | None = None
    session = 0
    if client is not None:
        if getattr(client, "connected", False):
            zk_state = "CONNECTED"
        else:
            zk_state = "LOST" if getattr(store, "session_lost", False) else "SUSPENDED"
        session = int(getattr(client, "session_id", 0) or 0)
    connect = services.config["zookeeper.connect"] or None
    return make(ctx.schema.DescribeBrokerRuntimeResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none, broker_id=services.broker_id,
                start_time_ms=services.started_ms,
                metadata_mode="zookeeper" if client is not None else "embedded",
                zookeeper_connect=str(connect) if client is not None and connect else None,
                zookeeper_state=zk_state, zookeeper_session=session, version=VERSION)
