"""Repair against real ring nodes: replicas no shard record names are collected."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr3.snapshot import SnapshotReader, SnapshotWriter
from sr3.storage import crc32
from sr3.synthetic import SyntheticSpec, iter_key_groups
from sr3_cli.cluster import open_cluster
from tests.integration.conftest import WaitUntil, running_lab

pytestmark = pytest.mark.zk

KEY_GROUPS = 16


def test_a_replica_no_record_names_is_deleted_after_the_grace(
    tmp_path: Path,
    zk_server: object,
    monkeypatch: pytest.MonkeyPatch,
    wait_until: WaitUntil,
) -> None:
    # a writer SIGKILLed mid-put leaves replicas no manifest will ever name:
    # they used to stay on the nodes for good
    monkeypatch.setenv("SR3_REPAIR_ORPHAN_GRACE_S", "0.5")
    monkeypatch.setenv("SR3_REPAIR_SCAN_INTERVAL_S", "0.2")
    ghost = b"left by a writer that died" * 100
    with running_lab(tmp_path / "lab") as lab, open_cluster(lab.config()) as cluster:
        writer = SnapshotWriter(
            store=cluster.store, manifests=cluster.manifests, max_shard_bytes=20_000
        )
        spec = SyntheticSpec(total_bytes=200_000, keys=None, seed=5)
        kept = writer.write(
            owner="kept",
            epoch=1,
            key_group_count=KEY_GROUPS,
            key_groups=iter_key_groups(spec, KEY_GROUPS),
        )
        _, live = cluster.store.ring()
        first = live[sorted(live)[0]]
        with cluster.store.pool.client(first) as client:
            assert client.put("ghost@1#0", ghost, crc32(ghost))

        def replicas(prefix: str) -> int:
            count = 0
            for node in live.values():
                with cluster.store.pool.client(node) as client:
                    count += len(client.list(prefix))
            return count

        wait_until(lambda: replicas("ghost@") == 0, timeout_s=30, what="the ghost")
        # every replica of the published snapshot is still there, and reads back
        assert replicas("kept@") == 3 * len(kept.shards)
        reader = SnapshotReader(store=cluster.store, manifests=cluster.manifests)
        got = sum(len(data) for _, data in reader.stream(kept.manifest))
        assert got == kept.bytes_written
