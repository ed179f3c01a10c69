"""The console's pages: server-rendered HTML (aiohttp and Jinja2 templates shipped in the
package, a little CSS, no JavaScript build).

Every page is a GET of what the cluster says now; every change is a POST that redirects
back (post/redirect/get), with a one-line notice or error in the query string. All
cluster access goes through ``dmq.web.kafka.Cluster`` (the Kafka protocol), all of it
async on the one event loop.

Routes are added in ``routes()``; that is also the place for ``/metrics``.
"""

from __future__ import annotations

import asyncio
import calendar
import heapq
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from aiohttp import web

from dmq.client.security import ClientSecurity
from dmq.web import format as fmt
from dmq.web.kafka import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    TOPIC_RESOURCE,
    Cluster,
    ConsoleError,
    Message,
    Metadata,
)
from dmq.web.sampler import History, Sampler

HERE = Path(__file__).parent
CONSOLE_KEY: web.AppKey[Console] = web.AppKey("console")
MAX_LIMIT = 500  # records a message browser page shows at most
PAGE_SIZE = 100  # partitions a table shows at a time
NEWEST_CACHE = 100_000  # partitions whose newest (and oldest) record the console remembers
SEARCH_RECORDS = 1000  # records a search string is looked for in
SEARCH_PARTITIONS = 50  # from the partitions whose records come first
ACTIVE_STATES = {"Stable", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Console:
    """The console of one cluster: its pages, its Cluster connections, its sampler.

    ``app()`` builds the aiohttp application; its startup starts the sampler and its
    cleanup stops it and closes the connections. Event-loop thread only."""

    def __init__(self, bootstrap: str, sample_interval: float = 10.0,
                 metrics: Callable[[], Awaitable[bytes]] | None = None,
                 security: ClientSecurity | None = None) -> None:
        # The broker's Prometheus text (dmq.metrics.exposition) when the console runs in
        # the broker's process (``dmq server --console``): served at /metrics.
        self.metrics = metrics
        self.cluster = Cluster(bootstrap, security=security)
        self.history = History()
        self.sampler = Sampler(self.cluster, self.history, sample_interval)
        # (topic, partition) -> (its end offset, offset and timestamp of its newest record)
        self._newest: dict[tuple[str, int], tuple[int, int, int]] = {}
        # (topic, partition) -> (its log start offset, offset and timestamp of its first record)
        self._oldest: dict[tuple[str, int], tuple[int, int, int]] = {}
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(size=fmt.size, timestamp=fmt.timestamp, age=fmt.age, rate=fmt.rate,
                                      show=fmt.show_bytes)
        self.templates.globals["sparkline"] = sparkline

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._same_origin, self._errors])
        app[CONSOLE_KEY] = self
        app.add_routes(self.routes())
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    def routes(self) -> list[web.AbstractRouteDef]:
        metrics = [web.get("/metrics", self.metrics_page)] if self.metrics is not None else []
        return [*metrics,
            web.get("/", self.index),
            web.get("/cluster", self.cluster_page),
            web.get("/topics", self.topics_page),
            web.post("/topics", self.create_topic),
            web.get("/topics/{topic}", self.topic_page),
            web.post("/topics/{topic}/configs", self.alter_configs),
            web.post("/topics/{topic}/partitions", self.add_partitions),
            web.post("/topics/{topic}/delete", self.delete_topic),
            web.get("/topics/{topic}/messages", self.messages_page),
            web.post("/topics/{topic}/produce", self.produce),
            web.get("/groups", self.groups_page),
            web.get("/groups/{group}", self.group_page),
            web.post("/groups/{group}/reset", self.reset_offsets),
            web.post("/groups/{group}/delete", self.delete_group),
            web.get("/transactions", self.transactions_page),
            web.static("/static", HERE / "static"),
        ]

    async def _startup(self, _app: web.Application) -> None:
        self.sampler.start()

    async def _cleanup(self, _app: web.Application) -> None:
        await self.sampler.stop()
        self.cluster.close()

    @web.middleware
    async def _same_origin(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Changes come from the console's own pages: a browser's POST from another site (its
        Origin names another host) is refused, so a page elsewhere cannot delete topics
        through a console on loopback (cross-site request forgery)."""
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc != request.host:
                return web.Response(status=403, text="refused: a change from another site's page\n")
        return await handler(request)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ConsoleError as e:
            return self.render(request, "error.html", status=502, message=str(e))

    # ------------------------------------------------------------------ helpers

    def render(self, request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        values.setdefault("notice", request.query.get("notice"))
        values.setdefault("error", request.query.get("error"))
        values.setdefault("bootstrap", ",".join(f"{h}:{p}" for h, p in self.cluster.bootstrap))
        html = self.templates.get_template(template).render(path=request.path, **values)
        return web.Response(text=html, content_type="text/html", status=status)

    @staticmethod
    def back(location: str, **message: str) -> web.HTTPSeeOther:
        query = urlencode({k: v for k, v in message.items() if v})
        return web.HTTPSeeOther(location + (f"?{query}" if query else ""))

    # ------------------------------------------------------------------ cluster

    async def metrics_page(self, request: web.Request) -> web.StreamResponse:
        """The broker's metrics in Prometheus' text format (docs/metrics.md)."""
        assert self.metrics is not None
        return web.Response(body=await self.metrics(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def index(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/cluster")

    async def cluster_page(self, request: web.Request) -> web.Response:
        md = await self.cluster.metadata()
        dirs, runtime = await asyncio.gather(self.cluster.log_dirs(), self.cluster.broker_runtime())
        brokers = []
        for b in sorted(md.brokers.values(), key=lambda b: b.node_id):
            leaders = sum(1 for t in md.topics.values() for p in t.partitions if p.leader == b.node_id)
            replicas = sum(1 for t in md.topics.values() for p in t.partitions if b.node_id in p.replicas)
            brokers.append({"info": b, "controller": b.node_id == md.controller_id, "leaders": leaders,
                            "replicas": replicas, "dirs": dirs.get(b.node_id), "runtime": runtime.get(b.node_id)})
        under = [(t.name, p) for t in md.topics.values() for p in t.partitions if p.under_replicated and p.leader >= 0]
        offline = [(t.name, p) for t in md.topics.values() for p in t.partitions if p.leader < 0]
        modes = {r.metadata_mode for r in runtime.values() if r is not None}
        return self.render(request, "cluster.html", md=md, brokers=brokers, under=under, offline=offline,
                           zookeeper=[r for r in runtime.values() if r is not None and r.metadata_mode == "zookeeper"],
                           modes=modes)

    # ------------------------------------------------------------------ topics

    async def topics_page(self, request: web.Request) -> web.Response:
        md = await self.cluster.metadata()
        show_internal = request.query.get("internal") == "1"
        names = [t for t, info in md.topics.items() if show_internal or not info.internal]
        (start, end), sizes = await asyncio.gather(self.cluster.offsets(md, names),
                                                   self.cluster.leader_sizes(md))
        now = time.monotonic()
        rows = []
        for name in names:
            t = md.topics[name]
            keys = [(name, p.index) for p in t.partitions]
            known = all(k in end and k in start for k in keys)
            count = sum(end[k] - start[k] for k in keys) if known else None
            topic_end = sum(end.get(k, 0) for k in keys)
            rows.append({"info": t, "count": count,
                         "size": sum(sizes[k] for k in keys) if all(k in sizes for k in keys) else None,
                         "rate": self.history.rate(name, topic_end, now) if known else None,
                         "under": sum(1 for p in t.partitions if p.under_replicated),
                         "offline": sum(1 for p in t.partitions if p.leader < 0)})
        return self.render(request, "topics.html", rows=rows, show_internal=show_internal,
                           brokers=len(md.brokers))

    async def create_topic(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        name = str(form.get("name", "")).strip()
        try:
            partitions = int(str(form.get("partitions") or -1))
            rf = int(str(form.get("replication_factor") or -1))
            configs = parse_pairs(str(form.get("configs", "")))
        except ValueError as e:
            raise self.back("/topics", error=f"cannot create {name}: {e}") from None
        if not name:
            raise self.back("/topics", error="give the new topic a name")
        try:
            await self.cluster.create_topic(name, partitions, rf, configs)
        except ConsoleError as e:
            raise self.back("/topics", error=f"cannot create {name}: {e}") from None
        raise self.back(f"/topics/{quote(name, safe='')}", notice=f"Created topic {name}.")

    async def topic_page(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        md = await self.cluster.metadata()
        t = md.topics.get(name)
        if t is None:
            raise ConsoleError(f"topic {name} does not exist")
        wanted: dict[str, list[int]] = {name: [p.index for p in t.partitions]}
        (start, end), dirs, configs = await asyncio.gather(
            self.cluster.offsets(md, [name]), self.cluster.log_dirs(wanted),
            self.cluster.describe_configs(TOPIC_RESOURCE, name))
        sizes: dict[tuple[int, int], int] = {}  # (partition, broker) -> bytes
        for node, results in dirs.items():
            for _path, _total, _usable, found in results:
                for (_t, p), s in found.items():
                    sizes[(p, node)] = s
        rows: list[dict[str, Any]] = [{"p": p, "start": start.get((name, p.index)), "end": end.get((name, p.index)),
                 "size": sizes.get((p.index, p.leader)),
                 "replica_sizes": [(r, sizes.get((p.index, r))) for r in p.replicas]}
                for p in t.partitions]
        total = sum(r["size"] for r in rows if r["size"] is not None)
        count = sum(r["end"] - r["start"] for r in rows if r["end"] is not None and r["start"] is not None)
        shown, pager = paginate(rows, request)
        return self.render(request, "topic.html", topic=t, rows=shown, pager_info=pager, configs=configs,
                           total=total, count=count)

    async def alter_configs(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        form = await request.post()
        changes: dict[str, str | None] = {}
        key = str(form.get("name", "")).strip()
        if form.get("action") == "delete":
            changes[key] = None
        else:
            changes[key] = str(form.get("value", ""))
        if not key:
            raise self.back(f"/topics/{quote(name, safe='')}", error="give the config's name")
        try:
            await self.cluster.alter_topic_configs(name, changes)
        except ConsoleError as e:
            raise self.back(f"/topics/{quote(name, safe='')}", error=f"cannot change {key}: {e}") from None
        what = f"Removed the override of {key}." if changes[key] is None else f"Set {key}={changes[key]}."
        raise self.back(f"/topics/{quote(name, safe='')}", notice=what)

    async def add_partitions(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        form = await request.post()
        try:
            count = int(str(form.get("count", "")))
            await self.cluster.create_partitions(name, count)
        except ValueError:
            raise self.back(f"/topics/{quote(name, safe='')}", error="the partition count must be a number") from None
        except ConsoleError as e:
            raise self.back(f"/topics/{quote(name, safe='')}", error=f"cannot add partitions: {e}") from None
        raise self.back(f"/topics/{quote(name, safe='')}", notice=f"{name} now has {count} partitions.")

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        form = await request.post()
        if form.get("confirm") != name:
            raise self.back(f"/topics/{quote(name, safe='')}", error=f"type the topic's name ({name}) to delete it")
        try:
            await self.cluster.delete_topic(name)
        except ConsoleError as e:
            raise self.back(f"/topics/{quote(name, safe='')}", error=f"cannot delete {name}: {e}") from None
        raise self.back("/topics", notice=f"Deleted topic {name}.")

    # ------------------------------------------------------------------ messages

    async def messages_page(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        q = request.query
        md = await self.cluster.metadata([name])
        t = md.topics.get(name)
        if t is None:
            raise ConsoleError(f"topic {name} does not exist")
        form = {"partition": q.get("partition", "all"), "mode": q.get("mode", "newest"),
                "offset": q.get("offset", ""), "timestamp": q.get("timestamp", ""), "key": q.get("key", ""),
                "search": q.get("search", ""), "limit": q.get("limit", "50"),
                "format": q.get("format", "json") if q.get("format") in fmt.FORMATS else "json"}
        messages: list[Message] = []
        scanned = 0
        error = None
        try:
            messages, scanned = await self.browse(md, name, form)
        except ValueError as e:
            error = str(e)
        except ConsoleError as e:
            error = str(e)
        return self.render(request, "messages.html", topic=t, form=form, messages=messages, scanned=scanned,
                           browse_error=error, formats=fmt.FORMATS)

    async def browse(self, md: Metadata, name: str, form: dict[str, str]) -> tuple[list[Message], int]:
        """The records the message browser shows, and how many records were read for them."""
        t = md.topics[name]
        limit = int(form["limit"] or 50)
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"show between 1 and {MAX_LIMIT} records")
        if form["partition"] in ("", "all"):
            parts = [p.index for p in t.partitions]
        else:
            try:
                parts = [int(form["partition"])]
            except ValueError:
                raise ValueError(f'a partition is "all" or a number, got {form["partition"]!r}') from None
            if parts[0] not in {p.index for p in t.partitions}:
                raise ValueError(f"{name} has no partition {parts[0]}")
        mode, search = form["mode"], form["search"]
        if form["key"]:  # newest first, from the key index
            found = await self.cluster.query(md, name, parts, key=form["key"].encode(), max_records=limit)
            merged = merge(found, newest_first=True)
            if search:
                merged = [m for m in merged if fmt.matches(search, m.value, *(v for _k, v in m.headers))]
            return merged[:limit], sum(len(v) for v in found.values())
        latest = await self.cluster.list_offsets(md, {name: parts}, LATEST)
        hw = {p: latest.get((name, p), 0) for p in parts}
        records_wanted = SEARCH_RECORDS if search else limit
        if mode == "offset":
            # An offset is a position in each partition: the records shown are spread over the
            # partitions that have some there.
            try:
                offset = int(form["offset"] or 0)
            except ValueError:
                raise ValueError(f"an offset is a number, got {form['offset']!r}") from None
            live = [p for p in parts if hw[p] > offset]
            if not live:
                return [], 0
            window = max(1, -(-records_wanted // len(live)))
            windows = {p: (offset, min(hw[p], offset + window)) for p in live}
            ts = -1
        else:
            # Newest first, oldest first or from a time: ListOffsets finds each partition's
            # newest record (max timestamp), first record, or first record at the time; only
            # the partitions whose records come first are read, the k-th of them for at most
            # limit - k records, so the page holds exactly the newest (oldest) records.
            if mode == "newest":
                at = await self.newest_records(md, name, parts, hw)
                ts = -1
            elif mode == "oldest":
                at = await self.oldest_records(md, name, parts)
                ts = -1
            elif mode == "timestamp":
                ts = parse_time(form["timestamp"])
                at = await self.cluster.list_offsets_at(md, {name: parts}, ts)
            else:
                raise ValueError(f"unknown mode {mode}")
            found_at = [(t, p) for p in parts for o, t in [at.get((name, p), (-1, -1))]
                        if 0 <= o < hw[p]]
            found_at.sort(key=lambda x: (-x[0], x[1]) if mode == "newest" else x)
            if search:  # a search reads SEARCH_RECORDS records from the first partitions
                chosen = found_at[:SEARCH_PARTITIONS]
                sizes = [max(1, SEARCH_RECORDS // max(1, len(chosen)))] * len(chosen)
            else:
                chosen = found_at[:limit]
                sizes = [limit - k for k in range(len(chosen))]
            if not chosen:
                return [], 0
            windows = {}
            for (_t, p), size in zip(chosen, sizes, strict=True):
                if mode == "newest":
                    windows[p] = (max(0, hw[p] - size), hw[p])
                else:
                    first = at[(name, p)][0]
                    windows[p] = (first, min(hw[p], first + size))
            live = sorted(windows)
            window = max(sizes)
        found = await self.cluster.query(md, name, live, start_offsets={p: windows[p][0] for p in live},
                                         end_offsets={p: windows[p][1] for p in live},
                                         start_timestamp=ts, max_records=window)
        scanned = sum(len(v) for v in found.values())
        newest = mode == "newest"
        if newest:
            found = {p: list(reversed(ms)) for p, ms in found.items()}
        merged = merge(found, newest_first=newest)
        if search:
            merged = [m for m in merged if fmt.matches(search, m.key, m.value, *(v for _k, v in m.headers))]
        return merged[:limit], scanned

    async def newest_records(self, md: Metadata, name: str, parts: list[int],
                             hw: dict[int, int]) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's record with the largest timestamp (ListOffsets MAX_TIMESTAMP),
        remembered until the partition's end offset moves: only appends change it, and the
        lookup costs the broker a time-index search per partition."""
        cache = self._newest
        stale = [p for p in parts if cache.get((name, p), (-1,))[0] != hw[p]]
        if stale:
            found = await self.cluster.list_offsets_at(md, {name: stale}, MAX_TIMESTAMP)
            if len(cache) + len(found) > NEWEST_CACHE:
                cache.clear()
            for (t, p), (offset, ts) in found.items():
                cache[(t, p)] = (hw[p], offset, ts)
        return {(name, p): cache[(name, p)][1:] for p in parts if (name, p) in cache}

    async def oldest_records(self, md: Metadata, name: str,
                             parts: list[int]) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's first record with a timestamp (ListOffsets at time 0), remembered
        until the partition's log start offset moves (retention, DeleteRecords)."""
        starts = await self.cluster.list_offsets(md, {name: parts}, EARLIEST)
        cache = self._oldest
        stale = [p for p in parts if cache.get((name, p), (-1,))[0] != starts.get((name, p), -2)]
        if stale:
            found = await self.cluster.list_offsets_at(md, {name: stale}, 0)
            if len(cache) + len(found) > NEWEST_CACHE:
                cache.clear()
            for (t, p), (offset, ts) in found.items():
                cache[(t, p)] = (starts.get((t, p), -2), offset, ts)
        return {(name, p): cache[(name, p)][1:] for p in parts if (name, p) in cache}

    async def produce(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        form = await request.post()
        back = f"/topics/{quote(name, safe='')}/messages"
        try:
            partition = int(str(form.get("partition") or 0))
            headers: list[tuple[str, bytes | None]] = [
                (k, v.encode()) for k, v in parse_pairs(str(form.get("headers", ""))).items()]
        except ValueError as e:
            raise self.back(back, error=f"cannot produce: {e}") from None
        key = str(form.get("key", ""))
        value = str(form.get("value", ""))
        try:
            offset = await self.cluster.produce(name, partition, key.encode() if key else None,
                                                value.encode(), headers)
        except ConsoleError as e:
            raise self.back(back, error=f"cannot produce: {e}") from None
        raise self.back(back, notice=f"Produced a record to {name}-{partition} at offset {offset}.")

    # ------------------------------------------------------------------ groups

    async def groups_page(self, request: web.Request) -> web.Response:
        groups, complete = await self.cluster.list_groups()
        lags = {g: self.history.lag_series(g) for g, *_ in groups}
        return self.render(request, "groups.html", groups=groups, lags=lags, complete=complete)

    async def group_state(self, group: str) -> dict[str, Any]:
        desc = await self.cluster.describe_group(group)
        rows: list[dict[str, Any]] = []
        if desc.kind == "share":
            share = await self.cluster.share_offsets(group, desc.coordinator)
            md = await self.cluster.metadata(sorted({t for t, _p in share}))
            for (t, p), (start_offset, lag) in sorted(share.items()):
                rows.append({"topic": t, "partition": p, "committed": start_offset, "end": None,
                             "lag": lag if lag >= 0 else None, "member": owners(desc.members).get((t, p), "")})
            end = await self.cluster.list_offsets(md, {t: [p.index for p in md.topics[t].partitions]
                                                       for t in md.topics}, LATEST)
            for r in rows:
                r["end"] = end.get((r["topic"], r["partition"]))
        else:
            committed = await self.cluster.committed(group, desc.coordinator)
            assigned = {tp for m in desc.members for tp in m.assignment}
            keys = sorted(set(committed) | assigned)
            md = await self.cluster.metadata(sorted({t for t, _p in keys}))
            wanted: dict[str, list[int]] = {}
            for t, p in keys:
                wanted.setdefault(t, []).append(p)
            end = await self.cluster.list_offsets(md, wanted, LATEST)
            who = owners(desc.members)
            for k in keys:
                c, e = committed.get(k), end.get(k)
                rows.append({"topic": k[0], "partition": k[1], "committed": c, "end": e,
                             "lag": max(0, e - c) if c is not None and e is not None else None,
                             "member": who.get(k, "")})
        total = sum(r["lag"] for r in rows if r["lag"] is not None)
        return {"desc": desc, "rows": rows, "total": total, "md": md}

    async def group_page(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        state = await self.group_state(group)
        shown, pager = paginate(state["rows"], request)
        return self.render(request, "group.html", lag=self.history.lag_series(group), plan=None,
                           reset={"topic": "", "strategy": "earliest", "value": ""}, shown=shown,
                           pager_info=pager, **state)

    async def reset_offsets(self, request: web.Request) -> web.StreamResponse:
        """Plan a reset (earliest, latest, a timestamp or an offset, for all the group's
        topics or one); with ``execute`` commit it, else show it (a dry run). Refused while
        the group has members, as kafka-consumer-groups.sh refuses."""
        group = request.match_info["group"]
        form = await request.post()
        reset = {"topic": str(form.get("topic", "")), "strategy": str(form.get("strategy", "earliest")),
                 "value": str(form.get("value", "")).strip()}
        execute = form.get("execute") == "1"
        state = await self.group_state(group)
        desc, md = state["desc"], state["md"]
        if reset["topic"] and reset["topic"] not in md.topics:
            md = await self.cluster.metadata(sorted({*md.topics, reset["topic"]}))
        keys = [(r["topic"], r["partition"]) for r in state["rows"]
                if not reset["topic"] or r["topic"] == reset["topic"]]
        if reset["topic"] and reset["topic"] in md.topics and not keys:
            keys = [(reset["topic"], p.index) for p in md.topics[reset["topic"]].partitions]
        try:
            plan = await self.plan_reset(md, keys, reset["strategy"], reset["value"])
        except ValueError as e:
            shown, pager = paginate(state["rows"], request)
            return self.render(request, "group.html", lag=self.history.lag_series(group), plan=None,
                               reset=reset, error=f"cannot plan the reset: {e}", shown=shown, pager_info=pager,
                               **state)
        current = {(r["topic"], r["partition"]): r["committed"] for r in state["rows"]}
        rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "new": o}
                for (t, p), o in sorted(plan.items())]
        error = notice = None
        if execute:
            if desc.state in ACTIVE_STATES or desc.members:
                error = (f"group {group} has active members ({desc.state}): stop its consumers "
                         f"before resetting its offsets")
            elif not plan:
                error = "nothing to reset"
            else:
                try:
                    if desc.kind == "share":
                        await self.cluster.alter_share_offsets(group, desc.coordinator, plan)
                    else:
                        await self.cluster.commit(group, desc.coordinator, plan)
                except ConsoleError as e:
                    error = str(e)
                else:
                    raise self.back(f"/groups/{quote(group, safe='')}", notice=f"Reset {len(plan)} offsets of {group}.")
        shown, pager = paginate(state["rows"], request)
        return self.render(request, "group.html", lag=self.history.lag_series(group), plan=rows,
                           reset=reset, dry_run=not execute, error=error, notice=notice, shown=shown,
                           pager_info=pager, **state)

    async def plan_reset(self, md: Metadata, keys: list[tuple[str, int]], strategy: str,
                         value: str) -> dict[tuple[str, int], int]:
        wanted: dict[str, list[int]] = {}
        for t, p in keys:
            wanted.setdefault(t, []).append(p)
        start, end = await self.cluster.offsets(md, wanted)
        if strategy == "earliest":
            return {k: start[k] for k in keys if k in start}
        if strategy == "latest":
            return {k: end[k] for k in keys if k in end}
        if strategy == "offset":
            try:
                offset = int(value)
            except ValueError:
                raise ValueError(f"an offset is a number, got {value!r}") from None
            return {k: min(max(offset, start[k]), end[k]) for k in keys if k in start and k in end}
        if strategy == "timestamp":
            at = await self.cluster.list_offsets(md, wanted, parse_time(value))
            return {k: (at[k] if at.get(k, -1) >= 0 else end[k]) for k in keys if k in end}
        raise ValueError(f"unknown strategy {strategy}")

    async def delete_group(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info["group"]
        try:
            await self.cluster.delete_group(group)
        except ConsoleError as e:
            raise self.back(f"/groups/{quote(group, safe='')}", error=str(e)) from None
        raise self.back("/groups", notice=f"Deleted group {group}.")

    # ------------------------------------------------------------------ transactions

    async def transactions_page(self, request: web.Request) -> web.Response:
        txns = await self.cluster.open_transactions()
        return self.render(request, "transactions.html", txns=txns, now_ms=int(time.time() * 1000))


def paginate(rows: list[Any], request: web.Request) -> tuple[list[Any], dict[str, int]]:
    """The rows of the page ``?page=N`` (PAGE_SIZE to a page: a table of a thousand
    partitions stays quick to load), and the pager's numbers."""
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    try:
        page = min(max(1, int(request.query.get("page", "1"))), pages)
    except ValueError:
        page = 1
    first = (page - 1) * PAGE_SIZE
    return rows[first:first + PAGE_SIZE], {"page": page, "pages": pages, "first": first + 1 if rows else 0,
                                           "last": min(first + PAGE_SIZE, len(rows)), "total": len(rows)}


def owners(members: list[Any]) -> dict[tuple[str, int], str]:
    return {tp: m.member_id for m in members for tp in m.assignment}


def merge(found: dict[int, list[Message]], newest_first: bool) -> list[Message]:
    """Partitions' records (each in log order, or reversed for newest first) interleaved by
    timestamp."""
    lists = [found[p] for p in sorted(found)]
    if newest_first:
        return list(heapq.merge(*lists, key=lambda m: (m.timestamp, m.offset), reverse=True))
    return list(heapq.merge(*lists, key=lambda m: (m.timestamp, m.offset)))


def parse_pairs(text: str) -> dict[str, str]:
    """``key=value`` per line (or comma-separated); blank lines skipped."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_time(text: str) -> int:
    """Epoch milliseconds from a number, or from ``YYYY-MM-DDTHH:MM[:SS]`` (UTC) as a
    browser's datetime-local field sends it."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    for pattern in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return int(calendar.timegm(time.strptime(text, pattern)) * 1000)
        except ValueError:
            continue
    raise ValueError(f"a time is epoch milliseconds or YYYY-MM-DDTHH:MM:SS (UTC), got {text!r}")


def sparkline(series: list[tuple[int, int]], width: int = 240, height: int = 40) -> str:
    """An inline SVG polyline of (time, value) points, newest on the right ('' for fewer
    than two points). Values only: the markup is built here, never from user text."""
    if len(series) < 2:
        return ""
    t0, t1 = series[0][0], series[-1][0]
    top = max(v for _t, v in series) or 1
    span = max(1, t1 - t0)
    points = " ".join(f"{(t - t0) * width / span:.1f},{height - v * (height - 2) / top - 1:.1f}"
                      for t, v in series)
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/></svg>')
