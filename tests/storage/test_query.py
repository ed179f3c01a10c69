"""Message query over a Log (dmq.storage.query with the key indexes of
dmq.storage.key_indexer): a key query finds exactly the records with that key that
a brute-force scan of every batch finds, newest first, whatever the index covers
at that moment — across segments, compressed batches, transactions (committed,
aborted, open), compaction, truncation, deleted segments, restarts (clean and
not), a corrupt, stale or missing index file, hash collisions, and queries cut
into pages and budgets.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmq.config import BrokerConfig, LogConfig
from dmq.record.batch import TRANSACTIONAL_MASK, InvalidRecordError, parse_header, validate_batches
from dmq.record.records import encode_batch, record_keys
from dmq.storage import key_index, key_indexer, query
from dmq.storage.cleaner import LogCleaner
from dmq.storage.key_index import KeyIndexFile
from dmq.storage.key_indexer import KeyIndexer
from dmq.storage.log import Log
from tests.support.query import brute_force, index_fully, query_pages

KEYS = [b"a", b"b", b"order-42", b"", b"k" * 40]


@pytest.fixture(scope="module", autouse=True)
def small_pieces() -> Iterator[None]:
    """Runs, reads, chunks, pages and fence blocks of a few entries, so that small logs
    cross every boundary the code has."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(key_indexer, "READ_CHUNK", 700)
        mp.setattr(key_indexer, "RUN_ENTRIES", 5)
        mp.setattr(key_indexer, "MAX_MERGED", 12)
        mp.setattr(key_indexer, "MEMORY_ENTRIES", 20)  # runs to a file of the segment's first bytes
        mp.setattr(key_indexer, "RECORDS_PER_STEP", 2)
        mp.setattr(key_index, "FENCE_EVERY", 3)
        mp.setattr(query, "SCAN_CHUNK", 400)
        mp.setattr(query, "CANDIDATES_PAGE", 3)
        yield


@pytest.fixture(params=["crc32c", "colliding"])
def hashing(request: pytest.FixtureRequest) -> Iterator[str]:
    """The real key hash, and one under which most keys collide (every candidate is then
    a record to read and compare)."""
    if request.param == "crc32c":
        yield request.param
        return
    def colliding(key: bytes) -> int:
        return len(key) % 2

    def colliding_entries(body: bytes | memoryview, count: int, pos: int, base_offset: int, segment_base: int,
                          max_relative: int, out: list[int]) -> tuple[int, int, int | None]:
        """The indexer's walk (``key_entries``, whose C walk hashes with crc32c) with that hash."""
        keyed, end = record_keys(bytes(body), base_offset, count, pos)
        out.extend(colliding(key) << 32 | (offset - segment_base) for offset, key in keyed)
        return end, len(keyed), None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(query, "key_hash", colliding)
        mp.setattr(key_indexer, "key_entries", colliding_entries)
        yield request.param


def open_log(path: Path, policy: str, clean: bool = True) -> Log:
    config = LogConfig(BrokerConfig(), {"segment.bytes": "900", "index.interval.bytes": "150",
                                        "cleanup.policy": policy, "min.cleanable.dirty.ratio": "0.01",
                                        "delete.retention.ms": "100000000"})
    return Log(str(path), "t", 0, config, clean_shutdown=clean)


class Model:
    """Drives a Log the way producers, coordinators, followers and retention do."""

    def __init__(self, path: Path, policy: str) -> None:
        self.path = path
        self.policy = policy
        self.log = open_log(path, policy)
        self.indexer = KeyIndexer()
        self.ts = 1_000
        self.next_pid = 100
        self.open: dict[int, int] = {}  # producer id -> next sequence, for open transactions
        self.seq: dict[int, int] = {}

    def key(self, choice: int) -> bytes | None:
        if choice >= len(KEYS):
            return None if self.policy == "delete" else KEYS[0]
        return KEYS[choice]

    def append(self, choices: list[int], codec: int, pid: int = -1, txn: bool = False) -> None:
        self.ts += 1
        recs = [(self.key(c), b"v%d-%d" % (self.ts, i), [("n", b"%d" % i)]) for i, c in enumerate(choices)]
        seq = self.seq.get(pid, 0) if pid >= 0 else -1
        data = bytearray(encode_batch(recs, timestamp=self.ts, codec=codec, producer_id=pid,
                                      producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                                      attributes_extra=TRANSACTIONAL_MASK if txn else 0))
        self.log.append_as_leader(data, validate_batches(data, 10**7), 0, timestamp=self.ts)
        if pid >= 0:
            self.seq[pid] = seq + len(recs)

    def put(self, choices: list[int], codec: int) -> None:
        self.append(choices, codec)

    def txn_put(self, which: int, choices: list[int], codec: int) -> None:
        pids = sorted(self.open)
        if which < len(pids):
            pid = pids[which]
        else:
            pid = self.next_pid
            self.next_pid += 1
            self.open[pid] = 0
        self.append(choices, codec, pid, txn=True)

    def end(self, which: int, commit: bool) -> None:
        pids = sorted(self.open)
        if not pids:
            return
        pid = pids[which % len(pids)]
        del self.open[pid]
        self.ts += 1
        self.log.append_end_txn_marker(pid, 0, 0, commit, 0, timestamp=self.ts)

    def index(self, steps: int) -> None:
        self.indexer.run([self.log], time.monotonic() + 60, max_steps=steps)

    def roll(self) -> None:
        self.log.roll()

    def compact(self) -> None:
        if self.policy != "compact":
            return
        cleaner = LogCleaner(str(self.path.parent))
        plan = cleaner.plan([self.log], now=self.ts + 10)
        if plan is not None:
            cleaner.swap(cleaner.clean(plan))

    def truncate(self, fraction: float) -> None:
        lg = self.log
        bases = [h.base_offset for _, _, h in lg.batches_from(lg.log_start_offset) if h.base_offset >= lg.log_start_offset]
        if not bases:
            return
        lg.truncate_to(bases[int((len(bases) - 1) * fraction)])  # a follower truncates at a batch boundary
        # A follower after truncation: transactions cut or kept are ended, new producers follow.
        for pid in list(self.open):
            del self.open[pid]
            self.ts += 1
            try:
                lg.append_end_txn_marker(pid, 0, 0, False, 0, timestamp=self.ts)
            except InvalidRecordError:
                pass

    def delete_records(self, fraction: float) -> None:
        lg = self.log
        lg.delete_records_before(lg.log_start_offset + int((lg.high_watermark - lg.log_start_offset) * fraction))

    def restart(self, clean: bool) -> None:
        if clean:
            self.log.flush()
        self.log.close()
        self.indexer.close()
        self.log = open_log(self.path, self.policy, clean=clean)
        self.indexer = KeyIndexer()

    def damage_index_and_restart(self, pick: int, how: int) -> None:
        """A .keyindex corrupt (a byte flipped), torn or stale on disk, found at the next start."""
        files = sorted(p for p in os.listdir(self.path) if p.endswith(".keyindex"))
        if files:
            path = self.path / files[pick % len(files)]
            data = bytearray(path.read_bytes())
            if how == 0:
                data[len(data) // 2] ^= 0x40
            elif how == 1:
                data = data[: len(data) - 3]
            else:  # a valid file for a log of another size: stale
                found = KeyIndexFile.read_header(str(path))
                key_index.write_index(str(path), found.base_offset, found.log_size + 1, found.next_offset, [])
                data = bytearray(path.read_bytes())
            path.write_bytes(bytes(data))
        self.restart(clean=True)

    def lose_index_file(self, pick: int) -> None:
        """Someone deletes a .keyindex while the broker runs: queries scan that segment."""
        files = sorted(p for p in os.listdir(self.path) if p.endswith(".keyindex"))
        if files:
            os.unlink(self.path / files[pick % len(files)])

    def check(self, page: int, budget: int, read_committed: bool) -> None:
        for key in KEYS:
            _, found, _ = query_pages(self.log, key, read_committed=read_committed, page=page, budget=budget)
            assert found == brute_force(self.log, key, read_committed=read_committed), key


choices = st.lists(st.integers(0, len(KEYS)), min_size=1, max_size=6)
codecs = st.sampled_from([0, 0, 1, 2, 3, 4])
operations = st.one_of(
    st.tuples(st.just("put"), choices, codecs),
    st.tuples(st.just("put"), choices, codecs),
    st.tuples(st.just("txn_put"), st.integers(0, 2), choices, codecs),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("index"), st.integers(1, 40)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("truncate"), st.floats(0.3, 1.0)),
    st.tuples(st.just("delete_records"), st.floats(0.0, 0.5)),
    st.tuples(st.just("restart"), st.booleans()),
    st.tuples(st.just("damage_index_and_restart"), st.integers(0, 9), st.integers(0, 2)),
    st.tuples(st.just("lose_index_file"), st.integers(0, 9)),
    st.tuples(st.just("check"), st.integers(1, 7), st.sampled_from([1, 300, 2000, 1 << 40]), st.booleans()),
)


@settings(max_examples=int(os.environ.get("QUERY_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["delete", "compact"]), st.lists(operations, min_size=1, max_size=45))
def test_key_query_matches_a_brute_force_scan(tmp_path_factory: pytest.TempPathFactory, hashing: str,
                                              policy: str, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    model = Model(tmp_path_factory.mktemp("query") / "t-0", policy)
    try:
        for op in ops:
            getattr(model, op[0])(*op[1:])
        model.check(1000, 1 << 40, True)
        model.check(2, 500, False)
        index_fully(model.indexer, model.log)
        model.check(1000, 1 << 40, True)
        model.check(1000, 1 << 40, False)
        for key in KEYS:  # once indexed, a key query reads no log byte without an index
            assert query_pages(model.log, key)[2] == 0
    finally:
        model.log.close()
        model.indexer.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(choices, codecs, st.integers(0, 50)), min_size=1, max_size=30),
       st.integers(-1, 60), st.integers(-1, 60), st.integers(0, 3000), st.integers(1, 5))
def test_scans_and_time_filters_match_a_brute_force_scan(tmp_path_factory: pytest.TempPathFactory, batches: list,  # type: ignore[type-arg]
                                                          lo: int, hi: int, index_steps: int, page: int) -> None:
    """Without a key, the window's records oldest first; with timestamps, only those in
    [start, end) (record timestamps out of order too)."""
    model = Model(tmp_path_factory.mktemp("scan") / "t-0", "delete")
    try:
        for recs, codec, ts in batches:
            model.ts = 1_000 + ts - 1
            model.put(recs, codec)
        model.index(index_steps)
        start_ts = -1 if lo < 0 else 1_000 + lo
        end_ts = -1 if hi < 0 else 1_000 + hi
        for key in [None, *KEYS]:
            _, found, _ = query_pages(model.log, key, page=page, budget=700, start_timestamp=start_ts,
                                      end_timestamp=end_ts)
            assert found == brute_force(model.log, key, start_timestamp=start_ts, end_timestamp=end_ts), key
    finally:
        model.log.close()


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_a_query_survives_the_segments_it_reads_being_deleted_or_cleaned(tmp_path: Path, policy: str) -> None:
    """Retention deletes and the cleaner replaces segments between the steps of a query:
    it reads what it started with (or the cleaned copy), never another file."""
    model = Model(tmp_path / "t-0", policy)
    rng = random.Random(7)
    for _ in range(60):
        model.put([rng.randrange(len(KEYS)) for _ in range(4)], rng.choice([0, 1]))
    model.index(25)
    before = brute_force(model.log, b"a")

    def disturb() -> Generator[None, None, None]:
        yield
        model.compact()
        yield
        model.log.delete_records_before(model.log.log_end_offset // 2)
        model.log.delete_old_segments()
        junk = [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]  # reuse closed descriptors
        yield
        for fd in junk:
            os.close(fd)

    _, found, _ = query_pages(model.log, b"a", budget=1 << 40, between=disturb())
    # Records of segments deleted before the query reached them are gone (below the new
    # log start offset), compaction may have removed older records of the key; whatever
    # is found is a record that was there, in order, and every record still there is found.
    after = brute_force(model.log, b"a")
    assert set(after) <= set(found) <= set(before) and found == sorted(found, reverse=True)
    if policy == "delete":
        assert after == [f for f in found if f[0] >= model.log.log_start_offset]
    assert found[0] == before[0]
    model.log.close()


def test_an_offset_too_far_from_the_base_offset_makes_the_segment_scanned(tmp_path: Path) -> None:
    """A follower's segment written before followers rolled at such a batch can span
    offsets farther apart than 32 bits (compacted leaders): such a segment gets no key
    index, and queries scan it."""
    lg = open_log(tmp_path / "t-0", "delete")
    lg.append_as_follower(bytearray(encode_batch([(b"a", b"v", [])], base_offset=0, timestamp=1)))
    far = bytearray(encode_batch([(b"a", b"v", [])], base_offset=2**32 + 5, timestamp=1))
    lg.active_segment.append(far, [parse_header(far)], [0])  # as such a follower wrote it
    lg.log_end_offset = 2**32 + 6
    indexer = KeyIndexer()
    index_fully(indexer, lg)
    assert lg.segments[0].key_index.unindexable
    _, found, unindexed = query_pages(lg, b"a")
    assert found == [(2**32 + 5, False), (0, False)] and unindexed > 0
    lg.close()
