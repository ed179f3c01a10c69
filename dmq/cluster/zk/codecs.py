"""The JSON payloads of classic Kafka's znodes, encoded and decoded. Pure.

Decoders accept what Kafka writes (and ignore fields they do not know);
encoders write what Kafka reads. dmq adds ``session_timeout_ms`` to a
broker registration (how long the registering session lasts once silent).
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from dmq.cluster.metadata import BrokerInfo


def load(data: bytes | None) -> Any:
    return json.loads(data.decode()) if data else None


def dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def topic_id_to_kafka(hex_id: str) -> str:
    """Kafka stores topic ids base64url-encoded without padding."""
    return base64.urlsafe_b64encode(uuid.UUID(hex_id).bytes).decode().rstrip("=")


def topic_id_from_kafka(text: str) -> str:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))).hex


# ------------------------------------------------------------- /brokers/ids/<id>

def encode_broker(info: BrokerInfo, timestamp_ms: int, session_timeout_ms: int) -> bytes:
    endpoints = info.endpoints or (("PLAINTEXT", info.host, info.port, "PLAINTEXT"),)
    protocols = {name: proto for name, _, _, proto in endpoints}
    # Kafka: host and port are the PLAINTEXT endpoint's, for old clients; dmq keeps the
    # inter-broker address there (what its brokers connect to) and in the endpoints.
    return dump({"version": 5, "host": info.host, "port": info.port,
                 "endpoints": [f"{name}://{host}:{port}" for name, host, port, _ in endpoints],
                 "listener_security_protocol_map": protocols, "rack": info.rack,
                 "jmx_port": -1, "timestamp": str(timestamp_ms), "features": {},
                 "session_timeout_ms": session_timeout_ms})


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    raw = load(data)
    protocols = raw.get("listener_security_protocol_map") or {}
    endpoints = []
    for text in raw.get("endpoints") or ():
        name, sep, address = str(text).partition("://")
        ep_host, _, ep_port = address.rpartition(":")
        if sep and ep_port.isdigit():
            if ep_host.startswith("[") and ep_host.endswith("]"):  # an IPv6 address
                ep_host = ep_host[1:-1]
            endpoints.append((name, ep_host, int(ep_port), str(protocols.get(name, name))))
    host, port = str(raw["host"]), int(raw["port"])
    if endpoints == [("PLAINTEXT", host, port, "PLAINTEXT")]:
        endpoints = []  # one PLAINTEXT listener: what BrokerInfo says without endpoints
    return BrokerInfo(broker_id, host, port, raw.get("rack"), tuple(endpoints))


def broker_session_timeout_ms(data: bytes | None) -> int:
    """The session timeout a registration says its session has (0 when it does not say)."""
    raw = load(data) or {}
    return int(raw.get("session_timeout_ms") or 0)


# --------------------------------------------------------- /brokers/topics/<topic>

@dataclass(slots=True)
class Assignment:
    """A topic's znode: its id, replicas per partition, and a reassignment in flight."""

    topic_id: str  # uuid hex
    partitions: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)


def encode_assignment(a: Assignment) -> bytes:
    def by_str(m: dict[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items())}
    return dump({"version": 3, "topic_id": topic_id_to_kafka(a.topic_id),
                 "partitions": by_str(a.partitions), "adding_replicas": by_str(a.adding),
                 "removing_replicas": by_str(a.removing)})


def decode_assignment(data: bytes) -> Assignment:
    raw = load(data)

    def by_int(m: dict[str, list[int]] | None) -> dict[int, list[int]]:
        return {int(p): [int(r) for r in rs] for p, rs in (m or {}).items()}
    return Assignment(topic_id_from_kafka(raw["topic_id"]), by_int(raw["partitions"]),
                      by_int(raw.get("adding_replicas")), by_int(raw.get("removing_replicas")))


# ------------------------------------------- /brokers/topics/<t>/partitions/<p>/state

@dataclass(slots=True)
class LeaderAndIsr:
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]


def encode_state(s: LeaderAndIsr) -> bytes:
    return dump({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                 "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def decode_state(data: bytes) -> LeaderAndIsr:
    raw = load(data)
    return LeaderAndIsr(int(raw.get("controller_epoch", 0)), int(raw["leader"]),
                        int(raw["leader_epoch"]), [int(r) for r in raw["isr"]])


# ------------------------------------------------ /config/topics/<t>, /config/brokers/<e>

def encode_config(configs: dict[str, str]) -> bytes:
    return dump({"version": 1, "config": dict(configs)})


def decode_config(data: bytes | None) -> dict[str, str]:
    raw = load(data) or {}
    return {str(k): str(v) for k, v in (raw.get("config") or {}).items()}


# ------------------------------------------------------- /controller, /cluster/id

def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id; -1 when there is none."""
    return int(load(data)["brokerid"]) if data else -1


def encode_cluster_id(cluster_id: str) -> bytes:
    return dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(load(data)["id"])


# --------------------------------------------------------- /latest_producer_id_block

def encode_producer_id_block(broker_id: int, start: int, count: int) -> bytes:
    return dump({"version": 1, "broker": broker_id, "block_start": str(start),
                 "block_end": str(start + count - 1)})


def decode_producer_id_block_end(data: bytes) -> int:
    return int(load(data)["block_end"])


# ------------------------------------------- /admin/reassign_partitions and elections

def encode_admin(partitions: list[dict[str, Any]]) -> bytes:
    return dump({"version": 1, "partitions": partitions})


def decode_admin(data: bytes | None) -> list[dict[str, Any]]:
    raw = load(data) or {}
    return list(raw.get("partitions", []))
