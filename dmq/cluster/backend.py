"""ClusterBackend: this broker's replicas follow the published partition states.

Kafka's ``becomeLeaderOrFollower`` and Redpanda's ``controller_backend``: one
reconcile path for both modes. Whatever changed (a topic created or deleted
through this broker, a ZooKeeper watch, a session re-established, a config
altered elsewhere), ``reconcile()`` compares the metadata store's partition
states with what this broker runs and makes the difference good:

- a partition this broker leads: the ReplicaManager leads it in that epoch,
  with that ISR and state version, and no fetcher follows it;
- a partition it follows: the ReplicaManager follows, and a fetcher fetches it
  from the leader (throttled while a reassignment adds it here), unless the
  partition has no leader or this broker is shutting down;
- a partition it no longer hosts (deleted, reassigned away): its fetcher
  stops and its log is deleted; so is the log of a partition whose topic is
  there under a new topic id (deleted and created again since the last
  reconcile), and a new one is made;
- topic configs altered through another broker reach the local logs;
- the partitions of internal topics it leads (``__consumer_offsets``,
  ``__transaction_state``) are handed to their coordinators
  (``on_internal_leadership``), which load and unload their shards.
- a topic gone from the store, or there under a new topic id, since the last
  reconcile was deleted: ``on_topics_deleted`` is told its name (the group
  coordinator drops its committed offsets). The first reconcile only notes
  the topics; one deleted while this broker was down is not reported.

On SIGTERM, ``controlled_shutdown()`` stops following, asks the controller to
move this broker's leadership away and waits (bounded) until the cached states
show it has.

It also answers the replication layer's questions about the cluster: where a
broker is (fetchers), whether a partition exists anywhere, whether a broker
may join an ISR (KIP-841: registered, not shutting down), writes a leader's
ISR changes to the store and passes on a leader's resignation.

A partition that needs a new local log waits for it: the logs are created on a
worker thread (directories, metadata files, the first leader-epoch entry and
their fsyncs: tens of milliseconds for a topic of many partitions), one batch
at a time, and held and given their roles by the reconcile that follows.
``reconcile_now()`` waits for that (CreateTopics on a single broker answers
once its partitions can be used). A log that cannot be created is logged and
tried again a second later.

Invariants: ``reconcile()`` is idempotent and reads only cached metadata, so
calling it on every event is safe and cheap; it never calls ZooKeeper (the
ISR write is awaited by the ReplicaManager's own task) and creates no log.
Event-loop thread only, but for ``_open_new_logs``, which the worker runs on
logs nothing else holds yet (and which first writes the checkpoint snapshots
the reconcile had the log manager take after its deletes: a partition deleted
and created again must not take the deleted log's checkpointed offsets).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dmq.cluster.metadata import INTERNAL_TOPICS, MetadataStore
from dmq.cluster.zookeeper import ZooKeeperMetadataStore
from dmq.config import ConfigError, LogConfig
from dmq.replication.fetcher import ReplicaFetcherManager
from dmq.replication.partition import Partition
from dmq.replication.replica_manager import ReplicaManager, TopicPartition
from dmq.storage.cleaner import LogCleaner
from dmq.storage.log import Log
from dmq.storage.log_manager import LogManager

log = logging.getLogger("dmq.backend")

CREATE_RETRY_S = 1.0  # after a log could not be created


@dataclass(frozen=True, slots=True)
class NewLog:
    """A partition this broker hosts and has no log for yet; ``lead_epoch`` is the epoch
    it leads in, or -1 when it follows."""

    topic: str
    partition: int
    topic_id: str
    config: LogConfig
    lead_epoch: int


def _open_new_logs(log_manager: LogManager, wanted: list[NewLog]) -> tuple[list[tuple[NewLog, Log]], bool]:
    """Worker thread: create the logs, not held. A new log led here gets its first
    leader-epoch entry now, as ``Partition.make_leader`` would write it (epoch at offset 0),
    so that fsync is not on the event loop either. (The logs made, whether one failed.)"""
    made: list[tuple[NewLog, Log]] = []
    failed = False
    for new in wanted:
        try:
            lg = log_manager.open_new(new.topic, new.partition, new.topic_id, new.config)
            made.append((new, lg))
            if new.lead_epoch >= 0 and lg.log_end_offset == 0 and not lg.leader_epochs.entries:
                lg.leader_epochs.assign(new.lead_epoch, 0)
        except OSError as e:
            log.error("%s-%d: cannot create the log: %s", new.topic, new.partition, e)
            failed = True
        except Exception:  # a bug: logged, and the partition tried again like a disk error
            log.exception("%s-%d: creating the log failed", new.topic, new.partition)
            failed = True
    return made, failed


class ClusterBackend:
    def __init__(self, broker_id: int, store: MetadataStore, log_manager: LogManager,
                 cleaner: LogCleaner) -> None:
        self.broker_id = broker_id
        self.store = store
        self.zk = store if isinstance(store, ZooKeeperMetadataStore) else None
        self.log_manager = log_manager
        self.cleaner = cleaner
        self.replica_manager: ReplicaManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.on_internal_leadership: Callable[[str, dict[int, int]], None] = lambda topic, led: None
        self.on_topics_deleted: Callable[[frozenset[str]], None] = lambda names: None
        self._topic_ids: dict[str, str] | None = None  # at the last reconcile
        self.shutting_down = False
        self._scheduled = False
        self._creating: asyncio.Task[None] | None = None
        self._create_after = 0.0  # monotonic: no new log is created before (after a failure)

    def attach(self, replica_manager: ReplicaManager, fetchers: ReplicaFetcherManager | None,
               on_internal_leadership: Callable[[str, dict[int, int]], None],
               on_topics_deleted: Callable[[frozenset[str]], None] = lambda names: None) -> None:
        """Wire the parts built after the backend (they take its callbacks)."""
        self.replica_manager = replica_manager
        self.fetchers = fetchers
        self.on_internal_leadership = on_internal_leadership
        self.on_topics_deleted = on_topics_deleted

    # ------------------------------------------------------- what replication asks

    def known_partition(self, topic: str, partition: int) -> str | None:
        """The topic id of a partition this broker should host a log of, else None
        (log loading at startup deletes the others)."""
        meta = self.store.topic(topic)
        if meta is None or partition not in meta.partitions:
            return None
        if self.zk is not None and self.broker_id not in meta.partitions[partition].replicas:
            return None  # moved away (reassigned) while this broker was down
        return meta.topic_id

    def partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.store.topic(topic)
        return meta is not None and partition in meta.partitions

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        for b in self.store.brokers():
            if b.broker_id == broker_id:
                return b.host, b.port
        return None

    def broker_registered(self, broker_id: int) -> bool:
        """Alive (registered): Kafka's metadataCache.hasAliveBroker."""
        if self.zk is None:
            return True
        return any(b.broker_id == broker_id for b in self.store.brokers())

    def replica_eligible(self, broker_id: int) -> bool:
        """KIP-841: only a registered broker that is not shutting down may join an ISR."""
        if self.zk is None:
            return True
        return broker_id not in self.zk.shutting_down and \
            any(b.broker_id == broker_id for b in self.store.brokers())

    async def write_isr(self, partition: Partition, leader_epoch: int, isr: list[int],
                        expected_version: int) -> int | None:
        """A leader's ISR change, compare-and-set against ``expected_version``."""
        assert self.zk is not None
        return await self.zk.update_isr(partition.topic, partition.index, self.broker_id,
                                        leader_epoch, isr, expected_version)

    async def resign_leadership(self, partition: Partition, leader_epoch: int) -> None:
        """Ask the controller to elect another ISR member in this leader's place."""
        assert self.zk is not None
        await self.zk.request_leader_resignation(partition.topic, partition.index, leader_epoch)

    # ------------------------------------------------------------------ reconcile

    def schedule(self) -> None:
        """Reconcile soon, once for any number of events that arrive meanwhile."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.reconcile)

    def reconcile(self) -> None:
        """Make local roles follow the cached partition states (leader, follower, gone).

        A partition that needs a new local log is skipped: its log is created on a worker
        thread (``_create_logs``), which reconciles again once it is held."""
        self._scheduled = False
        rm = self.replica_manager
        if rm is None or (self.zk is not None and self.zk.session_lost):
            return  # not started, or the cache is stale until the session is back
        wanted: set[TopicPartition] = set()
        missing: list[NewLog] = []
        internal_led: dict[str, dict[int, int]] = {name: {} for name in INTERNAL_TOPICS}
        topics = self.store.topics()
        ids = {name: meta.topic_id for name, meta in topics.items()}
        if self._topic_ids is not None:
            deleted = frozenset(name for name, topic_id in self._topic_ids.items() if ids.get(name) != topic_id)
            if deleted:
                self.on_topics_deleted(deleted)
        self._topic_ids = ids
        for topic in topics.values():
            adding = self.zk.adding_replicas.get(topic.name, {}) if self.zk is not None else {}
            for index, state in topic.partitions.items():
                tp = (topic.name, index)
                if self.broker_id not in state.replicas and state.leader != self.broker_id:
                    continue
                wanted.add(tp)
                held = rm.partitions.get(tp)
                if held is not None and held.topic_id != topic.topic_id:
                    # Deleted and created again since the last reconcile (a session lost
                    # meanwhile, a slow watch): the log holds the earlier topic's records.
                    log.info("%s-%d: the topic was deleted and created again (topic id %s, was %s); "
                             "removing the earlier topic's log", topic.name, index, topic.topic_id,
                             held.topic_id)
                    if self.fetchers is not None:
                        self.fetchers.remove_partition(tp)
                    rm.remove_partition(topic.name, index, delete=True)
                    self.cleaner.forget(*tp)
                if tp not in rm.partitions and self.log_manager.get(*tp) is None:
                    missing.append(NewLog(topic.name, index, topic.topic_id,
                                          self.log_manager.config_for(topic.name),
                                          state.leader_epoch if state.leader == self.broker_id else -1))
                    continue
                if state.leader == self.broker_id:
                    if self.fetchers is not None:
                        self.fetchers.remove_partition(tp)
                    rm.become_leader(topic.name, index, topic.topic_id, state.leader_epoch,
                                     state.replicas, state.isr, state.version)
                    if topic.name in internal_led:
                        internal_led[topic.name][index] = state.leader_epoch  # partition -> epoch
                    continue
                rm.become_follower(topic.name, index, topic.topic_id, state.leader,
                                   state.leader_epoch, state.replicas, state.isr, state.version)
                if self.fetchers is None:
                    continue
                if state.leader >= 0 and not self.shutting_down:
                    self.fetchers.add_partition(tp, state.leader, state.leader_epoch,
                                                throttled=self.broker_id in adding.get(index, []))
                else:
                    self.fetchers.remove_partition(tp)
        for tp, part in list(rm.partitions.items()):
            meta = topics.get(tp[0])
            if meta is not None and part.log.config.overrides != meta.configs:
                # Altered through another broker: the watch on /config/topics brought it here.
                try:
                    self.log_manager.update_config(tp[0])
                except ConfigError as e:
                    log.warning("%s: keeping the old topic config; the new one is invalid: %s", tp[0], e)
            if tp not in wanted:
                log.info("%s-%d: no longer a replica here; removing the local log", *tp)
                if self.fetchers is not None:
                    self.fetchers.remove_partition(tp)
                rm.remove_partition(tp[0], tp[1], delete=True)
                self.cleaner.forget(*tp)
        self.log_manager.take_removals()  # once for this reconcile's deletes, before any creation
        for name, led in sorted(internal_led.items()):
            self.on_internal_leadership(name, led)
        if missing and self._creating is None and time.monotonic() >= self._create_after:
            # One creation at a time; the one running reconciles when it ends, and that
            # finds whatever went missing meanwhile.
            self._creating = asyncio.get_running_loop().create_task(self._create_logs(missing))

    async def reconcile_now(self) -> None:
        """Reconcile and wait until the partitions that needed new logs have them and their
        roles (a topic created on a single broker is usable once CreateTopics answers)."""
        self.reconcile()
        while (task := self._creating) is not None:
            await asyncio.wait({task})

    async def _create_logs(self, missing: list[NewLog]) -> None:
        """Create ``missing`` logs on a worker thread (directories, metadata files and their
        fsyncs stay off the event loop), hold those still wanted, reconcile again."""
        created: list[tuple[NewLog, Log]] = []
        failed = False
        try:
            created, failed = await asyncio.to_thread(_open_new_logs, self.log_manager, missing)
        finally:
            self._creating = None
        for new, lg in created:
            if self._hosts(new):
                self.log_manager.adopt(lg)
            else:  # deleted or moved away while it was being created
                lg.close()
                self.log_manager.discard_unheld(lg)
        if failed:  # disk full, permissions: logged; tried again in a while, not in a loop
            self._create_after = time.monotonic() + CREATE_RETRY_S
            asyncio.get_running_loop().call_later(CREATE_RETRY_S, self.schedule)
        self.reconcile()

    def _hosts(self, new: NewLog) -> bool:
        """Whether this broker still hosts the partition a log was made for (same topic id:
        not deleted and created again meanwhile)."""
        meta = self.store.topic(new.topic)
        state = meta.partitions.get(new.partition) if meta is not None else None
        return state is not None and meta is not None and meta.topic_id == new.topic_id and (
            self.broker_id in state.replicas or state.leader == self.broker_id)

    # ---------------------------------------------------------- controlled shutdown

    async def controlled_shutdown(self, max_retries: int, retry_backoff_s: float) -> None:
        """Stop following, ask the controller to move leadership away, wait until it has.

        Bounded like Kafka's: ``controlled.shutdown.max.retries`` attempts
        ``controlled.shutdown.retry.backoff.ms`` apart; past that (say ZooKeeper is
        unreachable) the broker shuts down anyway and its leadership moves when its
        session expires.
        """
        assert self.zk is not None
        self.shutting_down = True  # reconciles from now on start no fetcher
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        started = time.monotonic()
        budget = max_retries * retry_backoff_s
        deadline = started + budget
        remaining: list[str] = []
        requested = False
        while time.monotonic() < deadline:
            if not requested:
                try:
                    await self.zk.request_controlled_shutdown(
                        max(0.1, min(retry_backoff_s, deadline - time.monotonic())))
                    requested = True
                except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: retried, bounded
                    log.warning("controlled shutdown: cannot reach ZooKeeper (%s); retrying",
                                type(e).__name__)
                    await asyncio.sleep(max(0.0, min(retry_backoff_s / 10,
                                                     deadline - time.monotonic())))
                    continue
            remaining = self.still_leading()
            if not remaining:
                log.info("controlled shutdown: leadership moved away in %.2fs",
                         time.monotonic() - started)
                return
            await asyncio.sleep(0.1)
        if not requested:
            log.warning("controlled shutdown: ZooKeeper unreachable for %.1fs "
                        "(controlled.shutdown.max.retries=%d, controlled.shutdown.retry.backoff.ms"
                        "=%d); shutting down without it", budget, max_retries,
                        int(retry_backoff_s * 1000))
        else:
            log.warning("controlled shutdown incomplete after %.1fs; still leading %s",
                        budget, ", ".join(remaining[:10]))

    def still_leading(self) -> list[str]:
        """Partitions this broker leads that another live ISR member could take over."""
        live = {b.broker_id for b in self.store.brokers()}
        return [f"{t.name}-{p}" for t in self.store.topics().values()
                for p, s in t.partitions.items()
                if s.leader == self.broker_id
                and any(r in live and r != self.broker_id for r in s.isr)]
