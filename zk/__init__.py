"""ZooKeeper adapter: the only package that imports kazoo."""
