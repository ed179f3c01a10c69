"""ZooKeeper access, in layers: ``paths`` (Kafka's znode paths) and ``codecs`` (their JSON
payloads) are pure; ``client`` is the one module that uses kazoo: async calls bounded by a
timeout, run on one executor, with watches delivered on the event loop."""
