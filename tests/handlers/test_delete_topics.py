"""DeleteTopics against a real broker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.admin import create_topic
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.protocol.codec import make, request_class, request_module


def delete_topics(c: WireClient, version: int, names: list[str | None], ids: list[Any] | None = None) -> list[Any]:
    if version >= 6:
        mod = request_module(20, version)
        topics = tuple(make(mod.DeleteTopicState, name=n, topic_id=i)
                       for n, i in zip(names, ids or [None] * len(names), strict=True))
        answer = c.request(make(request_class(20, version), topics=topics, timeout=timedelta(seconds=10)))
    else:
        answer = c.request(make(request_class(20, version), topic_names=tuple(names), timeout=timedelta(seconds=10)))
    return [(r.name, ErrorCode(r.error_code)) for r in answer.responses]


@pytest.fixture
def no_deletes(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", overrides={"delete.topic.enable": "false"}).start()
    yield proc
    proc.close()


def test_deletion_disabled_is_invalid_request_before_v3(no_deletes: BrokerProcess) -> None:
    """As Kafka's KafkaApis: clients before DeleteTopics v3 do not know TOPIC_DELETION_DISABLED."""
    with WireClient("127.0.0.1", no_deletes.port) as c:
        assert create_topic(c, "kept", 1, 1)[0] == ErrorCode.none
        assert delete_topics(c, 1, ["kept"]) == [("kept", ErrorCode.invalid_request)]
        assert delete_topics(c, 3, ["kept"]) == [("kept", ErrorCode.topic_deletion_disabled)]
        assert delete_topics(c, 6, ["kept"]) == [("kept", ErrorCode.topic_deletion_disabled)]


def test_a_name_and_an_id_together_fail_the_request(broker: BrokerProcess) -> None:
    """Kafka: "Topic name and topic ID can not both be specified." (INVALID_REQUEST for every
    entry, nothing deleted); dmq used the name."""
    with WireClient("127.0.0.1", broker.port) as c:
        _, _, created = create_topic(c, "named-and-id", 1, 1)
        assert create_topic(c, "other-gone", 1, 1)[0] == ErrorCode.none
        answer = delete_topics(c, 6, ["named-and-id", "other-gone"], [created.topic_id, None])
        assert [e for _, e in answer] == [ErrorCode.invalid_request] * 2
        assert delete_topics(c, 6, [None], [created.topic_id]) == [("named-and-id", ErrorCode.none)]
        assert delete_topics(c, 6, ["other-gone"]) == [("other-gone", ErrorCode.none)]
