"""IncrementalAlterConfigs against a real (single, embedded-store) broker."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from support.admin import (
    GROUP,
    SET,
    TOPIC,
    at_once,
    create_topic,
    describe_configs,
    incremental_alter_request,
)
from support.broker import BrokerProcess

from dmq.client.wire import WireClient


@pytest.mark.parametrize(("resource_type", "first", "second"), [
    (TOPIC, "retention.ms", "segment.ms"),
    (GROUP, "share.record.lock.duration.ms", "share.delivery.count.limit"),
])
def test_concurrent_changes_of_one_resource_are_both_kept(broker: BrokerProcess, resource_type: int,
                                                          first: str, second: str) -> None:
    """Two clients SET different configs of one resource at once: each handler read the
    overrides, then wrote its map with its one change, so the last write dropped the other's
    change though both were answered NONE (30 rounds out of 30). Kafka applies them in turn."""
    name = f"race-{resource_type}"
    with WireClient("127.0.0.1", broker.port) as a, WireClient("127.0.0.1", broker.port) as b:
        if resource_type == TOPIC:
            assert create_topic(a, name, 1, 1)[0] == ErrorCode.none
        for i in range(10):
            answers = at_once([
                (a, incremental_alter_request(resource_type, name, [(first, SET, str(30_000 + i))])),
                (b, incremental_alter_request(resource_type, name, [(second, SET, str(3 + i % 5))]))])
            assert [r.error_code for x in answers for r in x.responses] == [ErrorCode.none] * 2
            error, _, configs = describe_configs(a, resource_type, name, [first, second])
            assert error == ErrorCode.none
            assert (configs[first].value, configs[second].value) == (str(30_000 + i), str(3 + i % 5)), i
