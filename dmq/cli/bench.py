"""``dmq bench produce|consume``: throughput and latency, like kafka-producer-perf-test.sh."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from dmq.cli.common import (
    Acks,
    Bootstrap,
    CommandConfigOption,
    Compression,
    admin_client,
    client_config,
    ensure_reachable,
    fail,
    kafka_error_text,
    list_topics,
    parse_pairs,
    resolve_idempotence,
)
from dmq.cli.help import Typer
from dmq.client.producing import produce_waiting

app = Typer(help="Measure produce and consume throughput.", no_args_is_help=True)
console = Console(stderr=True)


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> int:
    a = admin_client(bootstrap)
    try:
        md = list_topics(a, 10)
    except KafkaException as e:
        fail(f"cannot read the cluster's topics: {kafka_error_text(e)}")
    if topic in md.topics and md.topics[topic].error is None:
        return len(md.topics[topic].partitions)
    try:
        a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            fail(f"cannot create topic {topic}: {e.args[0].str()}")
    return partitions


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                    transient=False)


def shown(progress: Progress, task: TaskID, done: int, started: float) -> None:
    """Progress and rate so far (the rate too: updating only the count left the bar
    ending at '20000/20000 0 rec/s', the rate of the last update while sending)."""
    elapsed = time.perf_counter() - started
    progress.update(task, completed=done, rate=f"{done / max(elapsed, 1e-9):,.0f} rec/s")


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _summary(title: str, rows: list[tuple[str, str]]) -> None:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right", overflow="fold")
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


@app.command()
def produce(
    topic: Annotated[str, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="topic to write (created when missing)")] = "dmq-bench",
    num_records: Annotated[int, typer.Option(
        "--num-records", "-n", min=1, metavar="N", help="records to produce")] = 1_000_000,
    record_size: Annotated[int, typer.Option(
        "--record-size", "-s", min=0, metavar="BYTES", help="bytes per record value")] = 100,
    throughput: Annotated[int, typer.Option(
        "--throughput", metavar="N", help="records/s cap, -1 for none")] = -1,
    acks: Annotated[Acks | None, typer.Option(
        "--acks", show_default=False, metavar="[0|1|all|-1]",
        help="acks the producer asks for [default: all with --idempotence, else 1]")] = None,
    partitions: Annotated[int, typer.Option(
        "--partitions", "-p", min=1, metavar="N", help="partitions of the topic when it is created")] = 1,
    compression: Annotated[Compression, typer.Option(
        "--compression", case_sensitive=False, metavar="[none|gzip|snappy|lz4|zstd]",
        help="compression codec")] = "none",
    linger_ms: Annotated[int, typer.Option(
        "--linger-ms", metavar="MS", help="librdkafka linger.ms: how long a batch waits to fill")] = 5,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", metavar="BYTES", help="librdkafka batch.size")] = 1_000_000,
    idempotence: Annotated[bool, typer.Option(
        "--idempotence/--no-idempotence",
        help="enable.idempotence (needs acks=all, the default with it)")] = False,
    properties: Annotated[list[str] | None, typer.Option(
        "-X", metavar="KEY=VALUE", help="librdkafka producer property, repeatable (as kcat -X)")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Send records as fast as possible (or at --throughput) and report rate and latency."""
    if acks is None:
        acks = "all" if idempotence else "1"
    resolve_idempotence(acks, idempotence)
    _ensure_topic(bootstrap_server, topic, partitions)
    conf = client_config(bootstrap_server, **{
        "acks": acks, "compression.type": compression, "linger.ms": linger_ms,
        "batch.size": batch_size, "enable.idempotence": idempotence,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        **parse_pairs(properties)})
    try:
        producer = Producer(conf)
    except KafkaException as e:
        fail(f"bad producer property: {kafka_error_text(e)}", 2)
    payload = os.urandom(record_size)
    latencies: list[float] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(err.str())
        else:
            latencies.append(msg.latency() or 0.0)

    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("produce", total=num_records, rate="")
        for i in range(num_records):
            if throughput > 0:
                ahead = i / throughput - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
            produce_waiting(producer, topic, value=payload, on_delivery=on_delivery)
            if i % 5000 == 0:
                producer.poll(0)
                shown(progress, task, len(latencies), started)
        while len(latencies) + len(errors) < num_records and time.perf_counter() - started < 600:
            producer.poll(0.05)
            shown(progress, task, len(latencies), started)
        shown(progress, task, len(latencies), started)
    elapsed = time.perf_counter() - started
    lat = sorted(x * 1000 for x in latencies)
    rate = len(latencies) / elapsed
    _summary(f"produce: {topic}, {record_size} B records, acks={conf['acks']}", [
        ("records sent", f"{len(latencies):,}"),
        ("errors", f"{len(errors):,}" + (f" (first: {errors[0]})" if errors else "")),
        ("records/s", f"{rate:,.0f}"),
        ("MB/s", f"{rate * record_size / 1e6:,.2f}"),
        ("latency avg ms", f"{sum(lat) / max(len(lat), 1):.1f}"),
        ("latency p50 / p95 / p99 ms", f"{_percentile(lat, .5):.1f} / {_percentile(lat, .95):.1f} / {_percentile(lat, .99):.1f}"),
        ("latency max ms", f"{lat[-1] if lat else float('nan'):.1f}"),
    ])
    if errors:
        raise SystemExit(1)


@app.command()
def consume(
    topic: Annotated[str, typer.Option(
        "--topic", "-t", metavar="TOPIC", help="topic to read from the beginning")] = "dmq-bench",
    messages: Annotated[int, typer.Option(
        "--messages", "-n", min=1, metavar="N", help="records to consume")] = 1_000_000,
    timeout_s: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", help="give up after this many seconds")] = 120,
    properties: Annotated[list[str] | None, typer.Option(
        "-X", metavar="KEY=VALUE", help="librdkafka consumer property, repeatable (as kcat -X)")] = None,
    bootstrap_server: Bootstrap = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
) -> None:
    """Read records from the beginning of every partition and report the rate."""
    if timeout_s <= 0:
        fail("--timeout must be positive", 2)
    ensure_reachable(bootstrap_server)
    try:
        consumer = Consumer(client_config(bootstrap_server, **{
            "group.id": "dmq-bench", "enable.auto.commit": False, "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 100, **parse_pairs(properties)}))
    except KafkaException as e:
        fail(f"bad consumer property: {kafka_error_text(e)}", 2)
    try:
        md = list_topics(consumer, 10)
    except KafkaException as e:
        fail(f"cannot read the cluster's topics: {kafka_error_text(e)}")
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        fail(f"topic {topic} does not exist; run `dmq bench produce --topic {topic}` first")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in t.partitions])
    count = 0
    nbytes = 0
    started = time.perf_counter()
    first = None
    with _progress() as progress:
        task = progress.add_task("consume", total=messages, rate="")
        while count < messages and time.perf_counter() - started < timeout_s:
            for m in consumer.consume(10000, 0.2):
                if m.error():
                    continue
                if first is None:
                    first = time.perf_counter()
                count += 1
                nbytes += len(m.value() or b"")
            shown(progress, task, count, started)
    consumer.close()
    elapsed = time.perf_counter() - (first or started)
    _summary(f"consume: {topic}", [
        ("records", f"{count:,}"),
        ("records/s (from first record)", f"{count / max(elapsed, 1e-9):,.0f}"),
        ("MB/s", f"{nbytes / max(elapsed, 1e-9) / 1e6:,.2f}"),
        ("time to first record s", f"{(first or started) - started:.3f}"),
    ])
    if count < messages:
        fail(f"only {count} of {messages} records arrived within {timeout_s:.0f} s")
