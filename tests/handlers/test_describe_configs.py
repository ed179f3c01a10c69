"""DescribeConfigs against a real (single, embedded-store) broker."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from support.admin import BROKER, SET, describe_configs, incremental_alter
from support.broker import BrokerProcess

from dmq.client.wire import WireClient
from dmq.config import ConfigSource


def test_the_cluster_default_resource_shows_the_dynamic_defaults_alone(broker: BrokerProcess) -> None:
    """A BROKER resource named "" is the cluster-wide defaults: Kafka answers with the
    dynamic default configs only (ConfigHelper: currentDynamicDefaultConfigs), each of source
    DYNAMIC_DEFAULT_BROKER_CONFIG. dmq answered with this broker's whole config."""
    name = "follower.replication.throttled.rate"
    with WireClient("127.0.0.1", broker.port) as c:
        assert describe_configs(c, BROKER, "") == (ErrorCode.none, None, {})
        assert incremental_alter(c, BROKER, "", [(name, SET, "2000")]) == [(ErrorCode.none, None)]
        error, _, configs = describe_configs(c, BROKER, "")
        assert error == ErrorCode.none and list(configs) == [name]
        entry = configs[name]
        assert (entry.value, entry.config_source, entry.read_only) == (
            "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
        assert describe_configs(c, BROKER, "", ["num.partitions"])[2] == {}
        _, _, own = describe_configs(c, BROKER, "0")  # the broker's own resource: everything
        assert own[name].value == "2000" and "num.partitions" in own
