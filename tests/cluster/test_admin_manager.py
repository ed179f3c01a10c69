"""AdminManager's checks against an embedded store (no broker process)."""

from __future__ import annotations

import pytest

from dmq.cluster.admin_manager import AdminManager
from dmq.cluster.metadata import DEFAULT_BROKER_ENTITY, MetadataError


@pytest.mark.parametrize("name", ["\u0661", "\u00b2", "1\n", "-1", "one"])
def test_a_broker_config_resource_is_named_by_ascii_digits(name: str) -> None:
    """"١" (an Arabic-Indic one) and "²" passed ``str.isdigit``: their configs were stored
    under a znode no broker reads, and the change reported success."""
    with pytest.raises(MetadataError) as refused:
        AdminManager.broker_config_entity(name)
    assert refused.value.error == "invalid_request"


def test_broker_config_entities() -> None:
    assert AdminManager.broker_config_entity("3") == "3"
    assert AdminManager.broker_config_entity("") == DEFAULT_BROKER_ENTITY
