"""The transaction coordinator: Kafka transactions on the coordinator runtime."""
