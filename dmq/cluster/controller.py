"""Controller: the ZooKeeper-era Kafka controller, one event loop per cluster.

Every broker runs one; the one that wins the ephemeral ``/controller`` znode
(and bumps ``/controller_epoch``) is active, the others only wait to take over.
ZooKeeper watches never act: they enqueue a ``ControllerEvent`` and this loop
handles the events one batch at a time, on the event loop: every ZooKeeper call
goes through the store's async client, bounded by its timeout
(ZooKeeperUnavailable: retried later). The controller context is the store's
watch-fed cache: decisions read no znode per partition; a compare-and-set
refused because the cache lagged reads that one partition through.

Leader and ISR decisions are the pure transitions of
``dmq.cluster.partition_state_machine``; this class does their I/O.

What the active controller does:
- broker loss: partitions led by a dead broker get a new leader from the live
  ISR (the first in replica order), with the leader epoch bumped; dead
  followers leave the ISR. With no live ISR member the partition goes offline
  (leader -1, the ISR kept) unless the topic sets
  ``unclean.leader.election.enable``;
- broker return: offline partitions whose ISR holds it are led again;
- controlled shutdown (``/admin/controlled_shutdown/<id>``): that broker's
  leadership moves to other ISR members and it leaves every ISR it can;
- preferred leader election (``/admin/preferred_replica_election``, and every
  ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``): the first replica leads again once in the ISR;
- leader resignation (``/admin/leader_resignations``, dmq's own): a leader whose
  followers have all stopped fetching from it while they stay registered (it is
  cut off from them and its clients, but not from ZooKeeper) asks to be
  replaced; when at least ``min.insync.replicas`` other ISR members are live,
  the first of them leads and the old leader leaves the ISR. Kafka's ZooKeeper
  mode has no such path: such a partition stays unavailable until the cut heals;
- reassignment (``/admin/reassign_partitions``): the new replicas are added
  (throttled), and once all of them are in the ISR, leadership moves into the
  target set and the old replicas are dropped.

Every partition-state write is a compare-and-set on the znode version that
also stamps this controller's epoch, and every controller write checks
``/controller_epoch`` at the version this broker's election wrote, so a deposed
controller's writes fail (ControllerMovedError): it stops acting at once, as it
does when ``/controller`` names another broker (Kafka's maybeResign).

Broker epochs: a broker that restarted and registered again before the
controller saw it gone (the same ids before and after) is told by the czxid of
its registration. It is handled as a failure and then a return (Kafka's
bouncedBrokerIds): it leaves every ISR and loses its leaderships with the
leader epoch bumped, then follows and catches up as any returning broker. Kept
in the ISR, a replica that came back with less data (a lost disk, a lost
unflushed tail) could be elected and lose acknowledged records.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import Any

from dmq.cluster.metadata import MetadataError, PartitionState
from dmq.cluster.partition_state_machine import (
    ClusterFacts,
    Election,
    PartitionStatus,
    reconcile_partition,
    transition_to,
)
from dmq.cluster.zk.client import ZooKeeperUnavailable
from dmq.cluster.zookeeper import ControllerMovedError, ZooKeeperMetadataStore
from dmq.config import BrokerConfig, LogConfig

log = logging.getLogger("dmq.controller")

REASSIGN = "/admin/reassign_partitions"
PREFERRED = "/admin/preferred_replica_election"
RESIGNATIONS = "/admin/leader_resignations"


class ControllerEvent(enum.Enum):
    """What the controller reacts to (Kafka's ControllerEvent types)."""

    CONTROLLER_CHANGE = "controller"  # /controller changed: maybe elect this broker
    SESSION_ESTABLISHED = "session"  # a new ZooKeeper session: re-elect
    SESSION_EXPIRED = "session_lost"  # this broker is no longer the controller
    BROKER_CHANGE = "brokers"  # /brokers/ids changed
    TOPIC_CHANGE = "topics"  # an assignment or a partition state changed
    ADMIN_REQUEST = "admin"  # reassignment, preferred election, controlled shutdown
    TICK = "tick"  # nothing happened for a second: periodic work

    @classmethod
    def from_notification(cls, what: str) -> ControllerEvent | None:
        """The event for one of the metadata store's change notifications, if any."""
        try:
            return cls(what)
        except ValueError:
            return None


E = ControllerEvent


class Controller:
    def __init__(self, store: ZooKeeperMetadataStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self.broker_id = store.broker_id
        self.active = False
        self.events: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self.live: set[int] = set()
        self.broker_epochs: dict[int, int] = {}  # live broker -> the czxid of its registration
        self._last_rebalance = time.monotonic()
        self.rebalance_interval = int(config["leader.imbalance.check.interval.seconds"])

    def enqueue(self, event: ControllerEvent) -> None:
        self.events.put_nowait(event)

    async def run(self, stopping: asyncio.Event) -> None:
        self.enqueue(E.CONTROLLER_CHANGE)
        while not stopping.is_set():
            try:
                first = await asyncio.wait_for(self.events.get(), 1.0)
                batch = {first}
                while not self.events.empty():
                    batch.add(self.events.get_nowait())
            except TimeoutError:
                batch = {E.TICK}
            if E.SESSION_EXPIRED in batch:
                self.active = False
                batch.discard(E.SESSION_EXPIRED)
            if not batch:
                continue
            try:
                await self._handle(batch)
            except ControllerMovedError as e:
                log.info("broker %d is no longer the controller: %s", self.broker_id, e)
                self.active = False
                self.enqueue(E.CONTROLLER_CHANGE)
            except ZooKeeperUnavailable as e:
                log.warning("controller: ZooKeeper unavailable (%s); retrying", e)
                await asyncio.sleep(0.5)
                self.enqueue(E.CONTROLLER_CHANGE)
            except Exception:
                log.exception("controller events %s failed; will retry on the next event",
                              sorted(e.name for e in batch))
                await asyncio.sleep(0.5)
                self.enqueue(E.CONTROLLER_CHANGE)

    # ----------------------------------------------------------- event handling

    def facts(self, topic: str) -> ClusterFacts:
        return ClusterFacts(frozenset(self.live), frozenset(self.store.shutting_down & self.live),
                            self._unclean_allowed(topic))

    async def _handle(self, events: set[ControllerEvent]) -> None:
        if self.store.session_lost:
            self.active = False
            return
        if self.active and self.store.controller_id() not in (-1, self.broker_id):
            # /controller names another broker: this one was deposed (its znode deleted, or
            # its session replaced) and must not act on anything from now on.
            log.info("broker %d resigns as the controller: broker %d is the controller now",
                     self.broker_id, self.store.controller_id())
            self.active = False
        if events & {E.CONTROLLER_CHANGE, E.SESSION_ESTABLISHED} or not self.active:
            if self.store.controller_id() in (-1, self.broker_id) or E.SESSION_ESTABLISHED in events:
                await self._elect_self()
        if not self.active:
            return
        live = set(await self.store.broker_ids())
        changed_brokers = live != self.live
        bounced: set[int] = set()
        if changed_brokers or E.BROKER_CHANGE in events:
            epochs = await self.store.broker_epochs()
            live = set(epochs)
            changed_brokers = live != self.live
            bounced = {b for b in live & self.live if epochs[b] > self.broker_epochs.get(b, epochs[b])}
            self.broker_epochs = epochs
        if changed_brokers or bounced:
            gone, back = self.live - live, live - self.live
            if gone or back:
                log.info("controller: brokers %s left, %s joined; live %s",
                         sorted(gone), sorted(back), sorted(live))
            if bounced:
                log.info("controller: brokers %s registered again (restarted): handled as gone, "
                         "then back", sorted(bounced))
                self.live = live - bounced
                await self._check_partitions()
            self.live = live
        if changed_brokers or bounced or events & {E.BROKER_CHANGE, E.TOPIC_CHANGE, E.ADMIN_REQUEST}:
            await self._check_partitions()
        await self._progress_reassignments()
        await self._preferred_elections()
        await self._resignations()
        if self.config["auto.leader.rebalance.enable"] and \
                time.monotonic() - self._last_rebalance >= self.rebalance_interval:
            self._last_rebalance = time.monotonic()
            await self._rebalance_leaders()

    async def _elect_self(self) -> None:
        if self.store.controller_id() == self.broker_id and self.active:
            return
        if await self.store.try_become_controller():
            self.active = True
            self.broker_epochs = await self.store.broker_epochs()
            self.live = set(self.broker_epochs)
            log.info("broker %d became the controller (epoch %d); live brokers %s",
                     self.broker_id, self.store.controller_epoch, sorted(self.live))
            await self._check_partitions()
        elif self.store.controller_id() != self.broker_id:
            self.active = False

    # ---------------------------------------------------------------- elections

    def _unclean_allowed(self, topic: str) -> bool:
        meta = self.store.topic(topic)
        return bool(LogConfig(self.config, meta.configs if meta else {})["unclean.leader.election.enable"])

    def _min_insync_replicas(self, topic: str) -> int:
        meta = self.store.topic(topic)
        return int(LogConfig(self.config, meta.configs if meta else {})["min.insync.replicas"])

    def decide(self, topic: str, state: PartitionState, excluded: set[int]) -> PartitionState:
        """The partition state the controller wants, given live brokers and shutting-down ones."""
        facts = ClusterFacts(frozenset(self.live), frozenset(excluded), self._unclean_allowed(topic))
        decided = reconcile_partition(state, facts)
        if decided is None:
            return state
        new, _ = decided
        if new.leader >= 0 and new.leader not in state.isr:
            log.warning("%s: unclean leader election of %d (ISR %s is gone)", topic, new.leader,
                        state.isr)
        return new

    async def _write(self, topic: str, partition: int, new: PartitionState, version: int, why: str,
                     base_epoch: int = -1) -> bool:
        """Write ``new`` over the state at ``version`` (decided from a state in ``base_epoch``)."""
        try:
            await self.store.update_partition_state(topic, partition, new, version, base_epoch)
        except (ZooKeeperUnavailable, ControllerMovedError):
            raise
        except MetadataError as e:
            log.info("%s-%d: state changed under the controller (%s); re-reading", topic, partition, e)
            return False
        log.info("%s-%d: leader %d epoch %d isr %s (%s)", topic, partition, new.leader,
                 new.leader_epoch, new.isr, why)
        return True

    async def _check_partitions(self) -> None:
        """Decide every partition from the watch-fed cache (no ZooKeeper read per partition
        per event); only a write refused because the cache lagged reads that one through."""
        excluded = self.store.shutting_down & self.live
        for name, meta in self.store.topics().items():
            for p, cached in meta.partitions.items():
                for attempt in range(3):
                    if attempt == 0 and cached.version >= 0:
                        state, version = cached, cached.version
                    else:
                        found = await self.store.read_partition_state(name, p)
                        if found is None:
                            break
                        state, version = found
                    new = self.decide(name, state, excluded)
                    if (new.leader, new.leader_epoch, new.isr) == (state.leader, state.leader_epoch, state.isr):
                        break
                    why = (Election.CONTROLLED_SHUTDOWN.value if state.leader in excluded else
                           Election.OFFLINE.value if state.leader != new.leader else
                           "replicas left the ISR")
                    if await self._write(name, p, new, version, why, state.leader_epoch):
                        break

    async def _elect_preferred(self, topic: str, partition: int) -> bool:
        found = await self.store.read_partition_state(topic, partition)
        if found is None:
            return False
        state, version = found
        new = transition_to(state, PartitionStatus.ONLINE, self.facts(topic), Election.PREFERRED)
        if new is None or new.leader == state.leader:
            return False
        return await self._write(topic, partition, new, version, Election.PREFERRED.value)

    async def _preferred_elections(self) -> None:
        wanted, version = await self.store.read_admin(PREFERRED)
        if version < 0:
            return
        for entry in wanted:
            await self._elect_preferred(str(entry["topic"]), int(entry["partition"]))
        try:
            await self.store.write_admin(PREFERRED, [], version, as_controller=True)
        except ControllerMovedError:
            raise
        except MetadataError:
            pass

    async def _resignations(self) -> None:
        """Replace leaders that asked to be (``Election.RESIGNATION``); an entry whose leader
        or epoch is no longer current is dropped unanswered."""
        wanted, version = await self.store.read_admin(RESIGNATIONS)
        if version < 0:
            return
        for entry in wanted:
            topic, partition = str(entry["topic"]), int(entry["partition"])
            found = await self.store.read_partition_state(topic, partition)
            if found is None:
                continue
            state, state_version = found
            if (state.leader, state.leader_epoch) != (int(entry["leader"]), int(entry["leader_epoch"])):
                continue
            facts = self.facts(topic)
            others = [r for r in state.isr if r in facts.eligible and r != state.leader]
            min_isr = self._min_insync_replicas(topic)
            new = transition_to(state, PartitionStatus.ONLINE, facts, Election.RESIGNATION) \
                if len(others) >= min_isr else None
            if new is None:
                log.info("%s-%d: leader %d resigns, but fewer than min.insync.replicas=%d other "
                         "ISR members are live (ISR %s); it stays", topic, partition, state.leader,
                         min_isr, state.isr)
                continue
            await self._write(topic, partition, new, state_version, Election.RESIGNATION.value)
        try:
            await self.store.write_admin(RESIGNATIONS, [], version, as_controller=True)
        except ControllerMovedError:
            raise
        except MetadataError:
            pass  # a new request arrived meanwhile: the next event handles it

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: per broker, when too many of its preferred partitions are led elsewhere."""
        threshold = int(self.config["leader.imbalance.per.broker.percentage"]) / 100
        preferred_of: dict[int, list[tuple[str, int]]] = {}
        for name, meta in self.store.topics().items():
            for p, s in meta.partitions.items():
                if s.replicas:
                    preferred_of.setdefault(s.replicas[0], []).append((name, p))
        for broker, parts in preferred_of.items():
            if broker not in self.live:
                continue
            metas = self.store.topics()
            off = [(t, p) for t, p in parts if metas.get(t) and p in metas[t].partitions
                   and metas[t].partitions[p].leader != broker]
            if parts and len(off) / len(parts) > threshold:
                log.info("leader imbalance on broker %d: %d of its %d preferred partitions led "
                         "elsewhere; electing preferred leaders", broker, len(off), len(parts))
                for t, p in off:
                    await self._elect_preferred(t, p)

    # -------------------------------------------------------------- reassignment

    async def _progress_reassignments(self) -> None:
        wanted, version = await self.store.read_admin(REASSIGN)
        if version < 0:
            return
        remaining: list[dict[str, Any]] = []
        for entry in wanted:
            topic, partition, target = str(entry["topic"]), int(entry["partition"]), list(entry["replicas"])
            try:
                done = await self._reassign(topic, partition, target, bool(entry.get("cancel")))
            except (ZooKeeperUnavailable, ControllerMovedError):
                raise
            except MetadataError as e:
                log.info("%s-%d: reassignment step retried: %s", topic, partition, e)
                done = False
            if not done:
                remaining.append(entry)
        if remaining != wanted:
            try:
                await self.store.write_admin(REASSIGN, remaining, version, as_controller=True)
            except ControllerMovedError:
                raise
            except MetadataError:
                pass

    async def _reassign(self, topic: str, partition: int, target: list[int], cancel: bool = False) -> bool:
        """One step of KIP-455's reassignment; True once the partition is on ``target`` alone.

        A cancellation (``cancel``, target = the replicas before the move) does not wait for
        the ISR: those replicas held the partition already; it only drops the added ones.
        """
        found = await self.store.read_assignment(topic)
        if found is None:
            return True  # topic deleted: nothing to do
        raw, version = found
        key = str(partition)
        current = list(raw["partitions"].get(key, []))
        adding = dict(raw.get("adding_replicas") or {})
        removing = dict(raw.get("removing_replicas") or {})
        in_flight = key in adding or key in removing
        if cancel and not in_flight:
            return True  # finished (or never started) before the cancellation arrived
        if not cancel and (not in_flight or any(r not in current for r in target)):
            if current == target:
                return True
            # Phase 1: replicas = target + the others; the new ones start fetching. A new
            # target for a move in flight keeps its replicas until the new move completes.
            original = [r for r in current if r not in adding.get(key, [])]
            raw["partitions"][key] = target + [r for r in current if r not in target]
            adding[key] = [r for r in target if r not in original]
            removing[key] = [r for r in current if r not in target]
            raw["adding_replicas"], raw["removing_replicas"] = adding, removing
            await self.store.write_assignment(topic, raw, version)
            log.info("%s-%d: reassigning %s -> %s", topic, partition, current, target)
            return False
        state_found = await self.store.read_partition_state(topic, partition)
        if state_found is None:
            return True
        state, state_version = state_found
        if not cancel and not all(r in state.isr for r in target):
            return False  # still catching up
        if state.leader not in target:
            new = transition_to(state, PartitionStatus.ONLINE, self.facts(topic),
                                Election.REASSIGNMENT, target)
            if new is None:
                return False  # no replica of the target can lead yet
            await self._write(topic, partition, new, state_version, Election.REASSIGNMENT.value)
            return False
        if any(r not in target for r in state.isr) and not await self._write(
                topic, partition,
                PartitionState(state.replicas, state.leader, state.leader_epoch, [r for r in state.isr if r in target]),
                state_version, "reassignment drops old replicas", state.leader_epoch):
            # Not out of the ISR yet: the assignment must not drop them first (a replica moved
            # back meanwhile would count as in sync with an empty log). Tried again next time.
            return False
        raw["partitions"][key] = target
        adding.pop(key, None)
        removing.pop(key, None)
        raw["adding_replicas"], raw["removing_replicas"] = adding, removing
        await self.store.write_assignment(topic, raw, version)
        log.info("%s-%d: reassignment %s %s", topic, partition,
                 "cancelled; back on" if cancel else "complete on", target)
        return True
