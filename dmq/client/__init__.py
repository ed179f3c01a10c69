"""Clients: a small Kafka wire client (the broker's followers use it),
``TransactionProducer`` for half messages with check-back (docs/half-messages.md) and
``RetryingConsumer`` for retries and dead letters of a consumer group (docs/retries.md)."""

from dmq.client.retrying import Record, RetryingConsumer
from dmq.client.transactions import (
    HalfMessage,
    Transaction,
    TransactionProducer,
    TransactionResolution,
)

__all__ = ["HalfMessage", "Record", "RetryingConsumer", "Transaction", "TransactionProducer",
           "TransactionResolution"]
