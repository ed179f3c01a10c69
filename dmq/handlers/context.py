"""What a handler is given: the broker's domain services and the request context."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Any

from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.metadata import MetadataStore
from dmq.cluster.producer_ids import ProducerIdManager
from dmq.config import BrokerConfig
from dmq.group.offsets_topic import Coordinators
from dmq.replication.fetch_session import FetchSessionCache
from dmq.replication.replica_manager import ReplicaManager
from dmq.security.authorizer import AclAuthorizer
from dmq.security.credentials import ScramCredentials
from dmq.share.admin import ShareGroupAdmin
from dmq.share.coordinator import ShareCoordinator
from dmq.share.service import ShareService
from dmq.storage.log_manager import LogManager
from dmq.transaction.coordinator import TransactionCoordinator

NO_THROTTLE = timedelta(0)

# KIP-932 share groups. ApiVersions lists exactly what is implemented and tested, and a
# share consumer (librdkafka's ShareConsumer) needs ShareFetch and ShareAcknowledge as
# well as ShareGroupHeartbeat: the share-group APIs are registered (a client that sends
# them is answered) but not advertised until the broker has a share persister and gives
# its handlers a share service (``BrokerServices.share``). Every share handler reads this flag.
SHARE_GROUPS_ADVERTISED = True


def _nothing() -> None:
    pass


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection (one log line, no traceback)."""


@dataclass(slots=True)
class BrokerServices:
    """Domain objects shared by every handler (event-loop thread only)."""

    broker_id: int
    config: BrokerConfig
    metadata: MetadataStore
    admin_manager: AdminManager
    replica_manager: ReplicaManager
    log_manager: LogManager
    producer_ids: ProducerIdManager
    coordinators: Coordinators
    transactions: TransactionCoordinator
    # api_key -> (min_version, max_version): what ApiVersions advertises.
    supported_apis: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Share sessions and share-partitions (ShareFetch, ShareAcknowledge); None until the
    # broker has a share persister: those APIs then answer UNSUPPORTED_VERSION, as Kafka
    # does with share groups disabled.
    share: ShareService | None = None
    # The share coordinator (``__share_group_state``); None where a test builds services without one.
    share_coordinator: ShareCoordinator | None = None
    # Share groups' offsets (DescribeShareGroupOffsets, AlterShareGroupOffsets,
    # DeleteShareGroupOffsets); None where a test builds services without one.
    share_admin: ShareGroupAdmin | None = None
    # The ACL authorizer (``authorizer.class.name``); None: no authorization, as in Kafka.
    # Handlers ask it through ``dmq.handlers.authorize`` only.
    authorizer: AclAuthorizer | None = None
    # SCRAM credentials (DescribeUserScramCredentials, AlterUserScramCredentials); None
    # where a test builds services without one.
    credentials: ScramCredentials | None = None
    # Fetch sessions (KIP-227): ``max.incremental.fetch.session.cache.slots`` of them.
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    # Epoch ms the broker started (DescribeBrokerRuntime, the console's "up since").
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    schema: ModuleType  # the kio response module of this API version
    # Call once the request's ordered part is done (a produce's appends): the connection
    # may start its next request while this one waits (dmq/server/network.py).
    dispatched: Callable[[], None] = _nothing
    # The client connection's id (dmq/server/network.py; 0: none, say a test's direct
    # call): share sessions remember it and are released when it closes.
    connection_id: int = 0
    # Kafka's KafkaPrincipal string of the connection's authenticated principal, and the
    # listener the request came in on (set by dmq/server/network.py's broker dispatch).
    principal: str = "User:ANONYMOUS"
    listener: str = "PLAINTEXT"
    # The connection's authentication state (dmq.security.sasl.ConnectionAuth; None: a
    # test's direct call): SaslHandshake and SaslAuthenticate drive it.
    auth: Any = None
