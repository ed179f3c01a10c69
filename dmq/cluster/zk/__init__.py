"""ZooKeeper access: the kazoo client and its connection policy (``client``)."""
