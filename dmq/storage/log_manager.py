"""LogManager: every partition Log under one data directory, plus checkpoints.

Files in the data directory (Kafka's text checkpoint format: version line,
count line, then ``<topic> <partition> <offset>`` lines):
- ``recovery-point-offset-checkpoint``: per-partition recovery points;
- ``log-start-offset-checkpoint``: per-partition log start offsets;
- ``.dmq_cleanshutdown``: present only between a clean shutdown and the next start.

The event-loop thread owns the logs. ``flush_pending()`` (fsync of rolled
segments) and the writer ``checkpoint_snapshots()`` returns are meant for a
background thread.

Invariant: once a new log of a partition exists, neither file (nor those others
register with ``add_checkpoint``: the high watermarks) names the partition with a
deleted log's values. A partition deleted and created again (a topic deleted and
created under the same name, a replica moved away and back) starts at offset 0;
the deleted log's entries (its log start offset above all, which would hide the
new log's acknowledged records after a crash) must not apply to it. At runtime,
``delete()`` notes that the files must change; ``take_removals()`` (event-loop
thread, once after a batch of deletes: ``get_or_create`` calls it, and the
cluster backend before it creates logs) snapshots every file as it should be now,
and ``open_new()`` writes those snapshots before it creates a directory, as Kafka
writes its checkpoints when it deletes a log. At start, ``load_logs`` writes both
files with the logs it kept; the ReplicaManager, built after it, does the same
with its file. The cleaner's ``cleaner-offset-checkpoint`` follows the same rule
by other means (``add_listeners``): a stale entry there is not harmless, it makes
the new log's first records count as deduplicated, and a tombstone among them is
dropped while the value it deletes stays. The LogCleaner drops a log's entry when
it is deleted or its directory is removed at start, writes only the entries of held
logs, and lowers an entry at once (written) when its log is truncated below it.

A directory whose ``partition.metadata`` names another topic id than the cluster
knows (the topic was deleted and created again while this broker was down) is
removed at start: it holds the earlier topic's records.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from dmq.config import LogConfig
from dmq.storage.log import Log, now_ms, partition_dir_name, read_partition_topic_id

log = logging.getLogger("dmq.storage")

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".dmq_cleanshutdown"
DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
Snapshot = tuple[int, dict[TopicPartition, int]]  # a CheckpointFile's numbered entries


def read_checkpoint(path: str) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return out
    if len(lines) < 2 or lines[0].strip() != "0":
        log.warning("ignoring malformed checkpoint file %s", path)
        return out
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                continue
    return out


def write_checkpoint(path: str, entries: dict[TopicPartition, int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"0\n{len(entries)}\n{body}")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")  # the rename itself, as Kafka's atomicMoveWithFallback


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _holds_logs(data_dir: str) -> bool:
    """Whether some directory of ``data_dir`` holds a segment file."""
    with os.scandir(data_dir) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as files:
                    if any(f.name.endswith(".log") for f in files):
                        return True
    return False


class CheckpointFile:
    """One checkpoint file, written off the event loop.

    The event loop takes a ``snapshot()`` of what the file should say (None when the
    last written one says it already); ``write()`` writes it, fsync and rename, on
    any thread. Writes are serialised, and a snapshot never replaces a later one that
    is already written: a write whose task was cancelled can still be running in its
    thread when the shutdown writes the final one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._written = 0  # the number of the newest snapshot written; under _lock
        self.written: dict[TopicPartition, int] = read_checkpoint(path)  # what the file says
        self._taken = 0  # snapshots taken, and the newest; event-loop thread
        # A missing file is written by the first snapshot, whatever it says: its existence
        # is what tells a later start that this data directory has logs to recover.
        self._last_taken: dict[TopicPartition, int] | None = self.written if os.path.exists(path) else None

    def snapshot(self, entries: dict[TopicPartition, int]) -> Snapshot | None:
        """``take(entries)``, or None when the file already says them (the newest snapshot
        says them and is written)."""
        if entries == self._last_taken and self._written == self._taken:
            return None
        return self.take(entries)

    def take(self, entries: dict[TopicPartition, int]) -> Snapshot:
        """``entries`` numbered for ``write``, changed or not."""
        self._taken += 1
        self._last_taken = entries
        return self._taken, entries

    def write(self, snapshot: Snapshot) -> None:
        number, entries = snapshot
        with self._lock:
            if number <= self._written:
                return
            write_checkpoint(self.path, entries)
            self._written, self.written = number, entries


def _writer(snapshots: list[tuple[CheckpointFile, Snapshot]]) -> Callable[[], None]:
    """A call that writes each snapshot to its file (any thread)."""
    def write() -> None:
        for f, snapshot in snapshots:
            f.write(snapshot)
    return write


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One partition's log in the data directory, as DescribeLogDirs reports it."""

    topic: str
    partition: int
    size: int  # bytes of its segments
    offset_lag: int  # Kafka's: max(high watermark - log end offset, 0)


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """The data directory (Kafka's one log dir): its logs and its volume's space
    (-1 when the volume cannot be asked)."""

    path: str
    total_bytes: int
    usable_bytes: int
    replicas: list[ReplicaLogInfo]


class LogManager:
    def __init__(self, data_dir: str, config_for: Callable[[str], LogConfig]) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.config_for = config_for
        self.logs: dict[TopicPartition, Log] = {}
        self._pending_flush: dict[TopicPartition, tuple[int, int]] = {}  # (up to, truncations)
        self._lock = threading.Lock()
        self._recovery_file = CheckpointFile(os.path.join(self.data_dir, RECOVERY_POINT_FILE))
        self._log_start_file = CheckpointFile(os.path.join(self.data_dir, LOG_START_FILE))
        # Every per-partition checkpoint file of the directory, with what it should say now.
        self._checkpoint_files: list[tuple[CheckpointFile, Callable[[], dict[TopicPartition, int]]]] = [
            (self._recovery_file, self._recovery_points), (self._log_start_file, self._log_starts)]
        self._removals_due = False  # a log was deleted since take_removals(); event-loop thread
        # The newest snapshots take_removals() took, not yet known written (the invariant).
        self._removal: Callable[[], None] | None = None  # under _removal_lock
        self._removal_lock = threading.Lock()
        # Told of each held log's truncation that cut records (log, offset cut to) and of each
        # partition whose log was removed (deleted, or its directory removed at start).
        self._truncation_listeners: list[Callable[[Log, int], None]] = []
        self._removal_listeners: list[Callable[[str, int], None]] = []
        self.loaded = False  # load_logs() is done: ``logs`` holds every log of the directory
        os.makedirs(self.data_dir, exist_ok=True)
        # Only the marker says the last shutdown was clean (Kafka's loadLogs). A data dir
        # without a recovery checkpoint is new only when it holds no segment: one deleted
        # by an operator, or a directory copied without it, means recovering every
        # segment (the checkpoint reads as empty: recovery points 0). Taken as clean, a
        # torn last batch was served and appended after.
        self.clean_shutdown = os.path.exists(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)) \
            or not (os.path.exists(os.path.join(self.data_dir, RECOVERY_POINT_FILE)) or _holds_logs(self.data_dir))

    def load_logs(self, known: Callable[[str, int], str | None]) -> float:
        """Open every partition directory; ``known(topic, p)`` gives its topic id or None.

        Directories of unknown topics and leftovers of deleted ones are removed.
        Returns the seconds taken.
        """
        started = time.monotonic()
        recovery = read_checkpoint(os.path.join(self.data_dir, RECOVERY_POINT_FILE))
        starts = read_checkpoint(os.path.join(self.data_dir, LOG_START_FILE))
        removed: list[TopicPartition] = []
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_partition_dir(name)
            if tp is None:
                continue
            topic_id = known(*tp)
            if topic_id is None:
                log.warning("removing log directory %s of a topic that no longer exists", name)
                self._schedule_delete(path)
                removed.append(tp)
                continue
            held_id = read_partition_topic_id(path)
            if held_id is not None and held_id != topic_id:
                log.warning("removing log directory %s: it holds topic id %s, the cluster's topic of that "
                            "name is %s (deleted and created again while this broker was down)",
                            name, held_id, topic_id)
                self._schedule_delete(path)
                removed.append(tp)
                continue
            lg = Log(path, tp[0], tp[1], self.config_for(tp[0]),
                     recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp, 0),
                     clean_shutdown=self.clean_shutdown, topic_id=topic_id)
            lg.on_roll = self._on_roll
            lg.on_truncate = self._on_truncate
            self.logs[tp] = lg
        self.loaded = True
        for tp in removed:  # once every kept log is held (a listener may write what they are)
            self._on_removed(tp)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        if os.path.exists(marker):
            os.unlink(marker)
        self.checkpoint()
        return time.monotonic() - started

    def get(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, topic_id: str) -> Log:
        lg = self.logs.get((topic, partition))
        if lg is None:
            self.take_removals()
            lg = self.adopt(self.open_new(topic, partition, topic_id, self.config_for(topic)))
        return lg

    def add_checkpoint(self, file: CheckpointFile, entries: Callable[[], dict[TopicPartition, int]]) -> None:
        """Another per-partition checkpoint file of this directory, with what it should say
        now (event-loop thread): a deleted partition leaves it too before its next log is
        created."""
        self._checkpoint_files.append((file, entries))

    def open_new(self, topic: str, partition: int, topic_id: str, config: LogConfig) -> Log:
        """The log of a partition this manager does not hold yet, created on disk (or opened,
        should its directory exist) but not held: plain file work, so a worker thread may
        do it (creating a topic's partitions is a few fsyncs each). ``adopt`` then holds
        it, on the owning thread.

        First it writes the checkpoint snapshots ``take_removals()`` took, unless written
        (the class invariant; thread-safe); an OSError doing so creates nothing."""
        self.write_removals()
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        return Log(path, topic, partition, config, clean_shutdown=True, topic_id=topic_id)

    def adopt(self, lg: Log) -> Log:
        """Hold a log ``open_new`` made; the held one when the partition already has one
        (the new object is closed)."""
        held = self.logs.get((lg.topic, lg.partition))
        if held is not None:
            if held is not lg:
                lg.close()
            return held
        lg.on_roll = self._on_roll
        lg.on_truncate = self._on_truncate
        self.logs[(lg.topic, lg.partition)] = lg
        return lg

    def add_listeners(self, truncated: Callable[[Log, int], None], removed: Callable[[str, int], None]) -> None:
        """``truncated(log, offset)`` after each truncation of a held log that cut records,
        ``removed(topic, partition)`` after a log is deleted or its directory removed at
        start (both on the event-loop thread, the second after every kept log is held)."""
        self._truncation_listeners.append(truncated)
        self._removal_listeners.append(removed)

    def _on_truncate(self, lg: Log, offset: int) -> None:
        for listener in self._truncation_listeners:
            listener(lg, offset)

    def _on_removed(self, tp: TopicPartition) -> None:
        for listener in self._removal_listeners:
            listener(*tp)

    def delete(self, topic: str, partition: int) -> None:
        lg = self.logs.pop((topic, partition), None)
        if lg is None:
            return
        with self._lock:
            self._pending_flush.pop((topic, partition), None)
        lg.close(defer=True)  # fetch answers may still hold slices of its files
        self._schedule_delete(lg.directory)
        self._removals_due = True
        self._on_removed((topic, partition))

    def take_removals(self) -> None:
        """After deletes (event-loop thread): snapshot every per-partition checkpoint file as
        it should be now, for the next ``open_new`` to write first. Cheap when nothing was
        deleted; one snapshot for any number of deletes."""
        if not self._removals_due:
            return
        self._removals_due = False
        write = _writer([(f, f.take(entries())) for f, entries in self._checkpoint_files])
        with self._removal_lock:
            self._removal = write

    def write_removals(self) -> None:
        """Write the snapshots the newest ``take_removals()`` took, unless done (any thread).
        A snapshot never replaces a later one, so whichever of these writes and the periodic
        checkpoints lands last, the files end with the newest state."""
        with self._removal_lock:
            write = self._removal
        if write is None:
            return
        write()
        with self._removal_lock:
            if self._removal is write:
                self._removal = None

    def discard_unheld(self, lg: Log) -> None:
        """Remove the directory of a closed log ``open_new`` made that was never held."""
        if (lg.topic, lg.partition) not in self.logs:
            self._schedule_delete(lg.directory)

    def _schedule_delete(self, path: str) -> None:
        target = f"{path}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        try:
            os.rename(path, target)
        except OSError:
            target = path
        threading.Thread(target=shutil.rmtree, args=(target, True), daemon=True).start()

    def describe(self, wanted: Mapping[str, Collection[int]] | None) -> LogDirDescription:
        """The logs of this data directory (DescribeLogDirs): all of them (``wanted`` None),
        or the partitions named (topic -> indexes); one not hosted here is left out, as
        Kafka does. In memory but
        for one statvfs of the volume."""
        replicas = [
            ReplicaLogInfo(t, p, lg.size_in_bytes, max(lg.high_watermark - lg.log_end_offset, 0))
            for (t, p), lg in sorted(self.logs.items())
            if wanted is None or p in wanted.get(t, ())]
        try:
            st = os.statvfs(self.data_dir)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        return LogDirDescription(self.data_dir, total, usable, replicas)

    def update_config(self, topic: str) -> None:
        config = self.config_for(topic)
        for (t, _p), lg in self.logs.items():
            if t == topic:
                lg.config = config

    # --------------------------------------------------------------- flushing

    def _on_roll(self, lg: Log, up_to: int) -> None:
        # Kafka flushes a rolled segment asynchronously; so do we. The log's truncation
        # count goes with it: a truncation before the flush begins counts as one during it.
        with self._lock:
            self._pending_flush[(lg.topic, lg.partition)] = (up_to, lg.truncations)

    def flush_pending(self) -> None:
        """fsync rolled segments (background thread)."""
        with self._lock:
            pending, self._pending_flush = self._pending_flush, {}
        for tp, (up_to, truncations) in pending.items():
            lg = self.logs.get(tp)
            if lg is not None:
                lg.flush_segments(up_to, truncations)

    def flush_dirty(self, now: int | None = None) -> None:
        """Apply flush.ms: flush logs whose last flush is older than it."""
        now = now_ms() if now is None else now
        for lg in list(self.logs.values()):
            if lg.unflushed_messages and now - lg.last_flush_ms >= lg.config.flush_ms:
                lg.flush()

    def run_retention(self, now: int | None = None) -> int:
        deleted = 0
        for lg in list(self.logs.values()):
            deleted += lg.delete_old_segments(now)
        return deleted

    def expire_producers(self, expiration_ms: int, now: int | None = None) -> int:
        """Drop idempotent producer state idle for longer than ``expiration_ms``."""
        now = now_ms() if now is None else now
        before = sum(len(lg.producer_state.producers) for lg in self.logs.values())
        for lg in self.logs.values():
            lg.producer_state.remove_expired(now, expiration_ms)
        return before - sum(len(lg.producer_state.producers) for lg in self.logs.values())

    def checkpoint_snapshots(self) -> Callable[[], None]:
        """What the recovery-point and log-start checkpoints should say now (event-loop
        thread), as a call that writes them (any thread). Written every time, changed or
        not, as Kafka's are: the recovery-point file's existence tells the next start that
        the directory has logs to recover."""
        return _writer([(self._recovery_file, self._recovery_file.take(self._recovery_points())),
                        (self._log_start_file, self._log_start_file.take(self._log_starts()))])

    def _recovery_points(self) -> dict[TopicPartition, int]:
        return {tp: lg.recovery_point for tp, lg in self.logs.items()}

    def _log_starts(self) -> dict[TopicPartition, int]:
        return {tp: lg.log_start_offset for tp, lg in self.logs.items()}

    def checkpoint(self) -> None:
        """Write both checkpoints now, on this thread (at start and at shutdown)."""
        self.checkpoint_snapshots()()

    def shutdown(self) -> None:
        """Flush everything, write checkpoints and the clean-shutdown marker: not the marker
        when a flush failed (the next start must recover what may not be on disk)."""
        failed = False
        for lg in self.logs.values():
            try:
                lg.flush()
            except OSError as e:
                failed = True
                log.error("flush of %s failed at shutdown: %s; the next start recovers the logs", lg.name, e)
                continue
            if lg.recovery_point < lg.log_end_offset:  # a segment's fsync failed (flush_segments stops there)
                failed = True
                log.error("flush of %s failed at shutdown (flushed to %d of %d); the next start recovers the "
                          "logs", lg.name, lg.recovery_point, lg.log_end_offset)
        self.checkpoint()
        for lg in self.logs.values():
            lg.close()
        if failed:
            return
        with open(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE), "w") as f:
            f.write(str(now_ms()))
            f.flush()
            os.fsync(f.fileno())
