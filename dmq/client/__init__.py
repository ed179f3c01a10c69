"""Clients: a small Kafka wire client (the broker's followers use it) and
``TransactionProducer`` for half messages with check-back (docs/half-messages.md)."""

from dmq.client.transactions import (
    HalfMessage,
    Transaction,
    TransactionProducer,
    TransactionResolution,
)

__all__ = ["HalfMessage", "Transaction", "TransactionProducer", "TransactionResolution"]
