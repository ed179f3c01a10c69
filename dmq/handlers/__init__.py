"""Handler registry: one module per Kafka API, each ``decode -> authorise -> one domain call -> response``.

Each module defines ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and
``async handle(services, ctx, request) -> response | None`` (None: no response,
as for acks=0 Produce). ApiVersions advertises exactly this registry.
"""

from __future__ import annotations

from types import ModuleType

from dmq.handlers import (
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    fetch,
    incremental_alter_configs,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)

HANDLERS: dict[int, ModuleType] = {
    m.API_KEY: m
    for m in (
        produce, fetch, list_offsets, metadata, api_versions, create_topics, delete_topics,
        delete_records, init_producer_id, describe_configs, alter_configs, create_partitions,
        incremental_alter_configs, describe_cluster,
    )
}


def supported_apis() -> dict[int, tuple[int, int]]:
    return {key: (m.MIN_VERSION, m.MAX_VERSION) for key, m in HANDLERS.items()}
