"""Snapshot writes against real ring nodes: what a failed write leaves behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sr3.snapshot import SnapshotWriter
from sr3.synthetic import SyntheticSpec, iter_key_groups
from sr3_cli.cluster import open_cluster
from sr3_cli.lab import Lab

pytestmark = pytest.mark.zk

KEY_GROUPS = 64


def test_a_write_interrupted_midway_leaves_no_replica_behind(lab: Lab) -> None:
    # Ctrl-C during `sr3 snapshot put` left every shard written so far on the
    # nodes for good: no manifest refers to them, so nothing ever collects them
    spec = SyntheticSpec(total_bytes=2_000_000, keys=None, seed=3)

    def key_groups() -> Iterator[tuple[int, bytes]]:
        for n, item in enumerate(iter_key_groups(spec, KEY_GROUPS)):
            if n == KEY_GROUPS // 2:
                raise KeyboardInterrupt
            yield item

    with open_cluster(lab.config()) as cluster:
        writer = SnapshotWriter(
            store=cluster.store, manifests=cluster.manifests, max_shard_bytes=64_000
        )
        with pytest.raises(KeyboardInterrupt):
            writer.write(
                owner="half",
                epoch=1,
                key_group_count=KEY_GROUPS,
                key_groups=key_groups(),
            )
        _, live = cluster.store.ring()
        left = []
        for node in live.values():
            with cluster.store.pool.client(node) as client:
                left += client.list("half@")
        assert cluster.manifests.latest("half") is None
        assert left == []
        # a later write of the same owner and epoch goes through unharmed
        report = writer.write(
            owner="half",
            epoch=1,
            key_group_count=KEY_GROUPS,
            key_groups=iter_key_groups(spec, KEY_GROUPS),
        )
        assert len(report.shards) > 1
