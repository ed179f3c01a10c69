"""ShareService: share sessions and share-partitions together, over a real ReplicaManager
and the in-memory persister (the wire is tests/share/test_share_handlers.py's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.share import TID, TP0, ShareEnv, run_share_env

from dmq.share.partition import AcquiredRange
from dmq.share.service import ShareService
from dmq.share.session import PartitionEntry, ShareSessionCache

ENTRIES = [PartitionEntry(TID, 0)]


async def share_fetch(svc: ShareService, epoch: int, connection: int, member: str = "m",
                      max_wait_ms: int = 0) -> tuple[AcquiredRange, ...]:
    """One ShareFetch of ``member`` on partition 0 (5 records at most); what it acquired."""
    out = await svc.share_fetch("g", member, epoch, ENTRIES, [], connection, max_wait_ms=max_wait_ms,
                                max_bytes=1 << 20, max_records=5, batch_size=5)
    got = out.partitions.get(TP0)
    return got.acquired if got is not None else ()


def test_a_stale_long_poll_releases_only_what_it_acquired(tmp_path: Path) -> None:
    """A member's long poll outlives its session (the connection dropped); the member
    opens a new session on another connection and acquires 0-4; then the old fetch wakes,
    acquires 5-9 and, its session gone, releases. It released every record the member
    id held, the new session's 0-4 with them, which another member then got while the
    first still held them. Now it releases 5-9 only."""
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        svc = ShareService(ShareSessionCache(), env.manager)
        await share_fetch(svc, 0, connection=1)
        old = asyncio.ensure_future(share_fetch(svc, 1, connection=1, max_wait_ms=3000))
        await asyncio.sleep(0.05)
        svc.connection_closed(1)  # the fetch keeps waiting
        await asyncio.sleep(0.05)
        await share_fetch(svc, 0, connection=2)
        env.produce(5)
        env.produce(5)
        assert await share_fetch(svc, 1, connection=2) == (AcquiredRange(0, 4, 1),)
        assert await asyncio.wait_for(old, 2) == (AcquiredRange(5, 9, 1),)
        assert (await env.fetch("other"))[TP0].acquired == (AcquiredRange(5, 9, 2),)
    run_share_env(tmp_path, scenario)


def test_a_late_close_release_spares_the_members_new_session(tmp_path: Path) -> None:
    """The release of a closed connection's sessions runs in the background; before it
    ran (a slow persister, a lock held), the member's new session acquired 0-4. The
    release freed them for anyone. Now it frees only what the old session acquired."""
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        svc = ShareService(ShareSessionCache(), env.manager)
        await share_fetch(svc, 0, connection=1)
        svc.connection_closed(1)  # the release task is scheduled, not run yet
        await share_fetch(svc, 0, connection=2)
        env.produce(5)
        assert await share_fetch(svc, 1, connection=2) == (AcquiredRange(0, 4, 1),)
        await asyncio.sleep(0.05)  # the old session's release runs
        assert (await env.fetch("other"))[TP0].acquired == ()
    run_share_env(tmp_path, scenario)


def test_a_replaced_session_releases_its_own_records_at_once(tmp_path: Path) -> None:
    """An epoch-0 fetch replacing the member's session releases what the old session
    held (dmq does not wait for the locks to time out), and the new one acquires again."""
    async def scenario(env: ShareEnv) -> None:
        await env.init_state()
        env.produce(3)
        svc = ShareService(ShareSessionCache(), env.manager)
        assert await share_fetch(svc, 0, connection=1) == (AcquiredRange(0, 2, 1),)
        assert await share_fetch(svc, 0, connection=1) == (AcquiredRange(0, 2, 2),)
        assert (await env.fetch("other"))[TP0].acquired == ()
    run_share_env(tmp_path, scenario)
