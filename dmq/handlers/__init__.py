"""Handler registry: one module per Kafka API, each ``decode -> authorise -> one domain call -> response``.

Each module defines ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and
``async handle(services, ctx, request) -> response | None`` (None: no response,
as for acks=0 Produce). ApiVersions advertises exactly this registry, except
modules with ``ADVERTISED = False``: dmq's own extension APIs (only ``dmq.client`` and
the CLI send them), the share coordinator's inter-broker APIs (83-87, sent by brokers'
share persisters only) and the share-group APIs until a share consumer can
work end to end (``context.SHARE_GROUPS_ADVERTISED``).
"""

from __future__ import annotations

from types import ModuleType

from dmq.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition_reassignments,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    check_transactions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_broker_runtime,
    describe_cluster,
    describe_configs,
    describe_delayed_records,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_share_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    query_records,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)

HANDLERS: dict[int, ModuleType] = {
    m.API_KEY: m
    for m in (
        produce, fetch, list_offsets, metadata, api_versions, create_topics, delete_topics,
        delete_records, init_producer_id, describe_configs, alter_configs, create_partitions,
        incremental_alter_configs, describe_cluster, find_coordinator, join_group, sync_group,
        heartbeat, leave_group, offset_commit, offset_fetch, list_groups, describe_groups,
        delete_groups, offset_delete, offset_for_leader_epoch, alter_partition_reassignments,
        list_partition_reassignments, elect_leaders, list_transactions,
        add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit, write_txn_markers,
        describe_transactions, describe_producers, describe_log_dirs, check_transactions, describe_delayed_records,
        query_records, describe_broker_runtime,
        share_group_heartbeat, share_group_describe, share_fetch, share_acknowledge,
        describe_share_group_offsets, alter_share_group_offsets, delete_share_group_offsets,
        describe_share_partitions,
        initialize_share_group_state, read_share_group_state, write_share_group_state,
        delete_share_group_state, read_share_group_state_summary,
        describe_acls, create_acls, delete_acls,
        sasl_handshake, sasl_authenticate, describe_user_scram_credentials,
        alter_user_scram_credentials,
    )
}


# APIs whose handlers may start eagerly, outside any task (dmq/server/network.py): up to
# their first await they use nothing that needs a current task. The hot path only.
EAGER_API_KEYS = frozenset({produce.API_KEY, fetch.API_KEY})


def supported_apis() -> dict[int, tuple[int, int]]:
    return {key: (m.MIN_VERSION, m.MAX_VERSION) for key, m in HANDLERS.items()
            if getattr(m, "ADVERTISED", True)}

