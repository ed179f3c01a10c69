"""Clients: a small Kafka wire client (the broker's followers use it),
``TransactionProducer`` for half messages with check-back (docs/half-messages.md) and
``RetryingConsumer`` for retries and dead letters of a consumer group (docs/retries.md).

Names are imported on first use (PEP 562): ``dmq.client.producing`` alone, which every
``dmq`` command may load, does not pull in kio through the wire client.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "HalfMessage": "dmq.client.transactions",
    "Transaction": "dmq.client.transactions",
    "TransactionProducer": "dmq.client.transactions",
    "TransactionResolution": "dmq.client.transactions",
    "Record": "dmq.client.retrying",
    "RetryingConsumer": "dmq.client.retrying",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'dmq.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
