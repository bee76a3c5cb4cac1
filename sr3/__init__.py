"""SR3 core: keyed state, codec, hash ring, storage nodes, replication and recovery."""
