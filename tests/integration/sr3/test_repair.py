"""Repair against real ring nodes: replicas no shard record names are collected."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from sr3.checksum import crc32
from sr3.errors import StorageError
from sr3.snapshot import SnapshotReader, SnapshotWriter
from sr3.synthetic import SyntheticSpec, iter_key_groups
from sr3_cli.cluster import open_cluster
from sr3_cli.lab import Lab
from tests.integration.conftest import WaitUntil, running_lab

pytestmark = pytest.mark.zk

KEY_GROUPS = 16
ORPHAN_GRACE_S = 0.5
#: What the repair coordinator logs (DEBUG) on each pass that leaves the sweep out.
SWEEP_SKIPPED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) DEBUG sr3\.repair: "
    r"orphan sweep skipped"
)


def sweeps_skipped(lab: Lab, since: float) -> list[list[float]]:
    """Per node, the times (epoch s) its repair passes skipped the orphan sweep."""
    found = []
    for node in lab.nodes.values():
        log = (Path(node.data_dir) / "node.log").read_text(errors="replace")
        times = []
        for match in map(SWEEP_SKIPPED.match, log.splitlines()):
            if match:
                stamp = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S"))
                times.append(stamp + int(match[2]) / 1000)
        found.append([t for t in times if t >= since])
    return found


def test_a_replica_no_record_names_is_deleted_after_the_grace(
    tmp_path: Path,
    zk_server: object,
    monkeypatch: pytest.MonkeyPatch,
    wait_until: WaitUntil,
) -> None:
    # a writer SIGKILLed mid-put leaves replicas no manifest will ever name:
    # they used to stay on the nodes for good
    monkeypatch.setenv("SR3_REPAIR_ORPHAN_GRACE_S", str(ORPHAN_GRACE_S))
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


def test_a_damaged_shard_record_stops_neither_repair_nor_keeps_its_replicas_from_it(
    tmp_path: Path,
    zk_server: object,
    monkeypatch: pytest.MonkeyPatch,
    wait_until: WaitUntil,
) -> None:
    # a shard record written by another version or by hand used to kill the
    # coordinator's repair thread: no node was re-replicated after that
    monkeypatch.setenv("SR3_REPAIR_ORPHAN_GRACE_S", str(ORPHAN_GRACE_S))
    monkeypatch.setenv("SR3_REPAIR_SCAN_INTERVAL_S", "0.2")
    ghost = b"left by a writer that died" * 100
    with (
        running_lab(tmp_path / "lab", nodes=4, log_level="DEBUG") as lab,
        open_cluster(lab.config()) as cluster,
    ):
        writer = SnapshotWriter(
            store=cluster.store, manifests=cluster.manifests, max_shard_bytes=20_000
        )
        spec = SyntheticSpec(total_bytes=60_000, keys=None, seed=5)
        written = {
            owner: writer.write(
                owner=owner,
                epoch=1,
                key_group_count=KEY_GROUPS,
                key_groups=iter_key_groups(spec, KEY_GROUPS),
            )
            for owner in ("kept", "damaged")
        }
        client = cluster.session.client
        directory = cluster.session.paths.shards("damaged")
        record = f"{directory}/{sorted(client.get_children(directory))[0]}"
        original, _ = client.get(record)
        client.delete(record)  # re-created: the shards directory's stamp moves
        client.create(record, b"\x01not a shard record")
        _, live = cluster.store.ring()
        holder = live[sorted(live)[0]]
        with cluster.store.pool.client(holder) as node:
            assert node.put("ghost@1#0", ghost, crc32(ghost))

        def replicas(prefix: str) -> int:
            _, now = cluster.store.ring()
            count = 0
            for node_info in now.values():
                try:
                    with cluster.store.pool.client(node_info) as node:
                        count += len(node.list(prefix))
                except StorageError:  # the victim, until its session ends
                    continue
            return count

        damaged = replicas("damaged@")
        assert damaged == 3 * len(written["damaged"].shards)
        victim = sorted(live)[-1]
        killed_at = time.time()
        lab.kill_nodes([victim])
        wait_until(
            lambda: (
                victim not in cluster.membership.members()
                and replicas("kept@") == 3 * len(written["kept"].shards)
            ),
            timeout_s=60,
            what="kept's shards re-replicated after a node died",
        )

        def passes_past_the_grace() -> bool:
            # one node's passes since the kill (each saw the ghost): one a grace
            # after its first, when a sweep would have deleted the ghost, and the
            # one after it (so the former finished)
            return any(
                sum(t - times[0] >= ORPHAN_GRACE_S for t in times) >= 2
                for times in sweeps_skipped(lab, since=killed_at)
            )

        wait_until(passes_past_the_grace, timeout_s=30, what="repair passes")
        assert replicas("ghost@") == 1  # no sweep while a record is unreadable
        assert replicas("damaged@") >= damaged - len(written["damaged"].shards)
        client.delete(record)
        client.create(record, original)  # mended: the sweep resumes
        wait_until(lambda: replicas("ghost@") == 0, timeout_s=30, what="the ghost")
        reader = SnapshotReader(store=cluster.store, manifests=cluster.manifests)
        got = sum(len(data) for _, data in reader.stream(written["damaged"].manifest))
        assert got == written["damaged"].bytes_written
    logs = "".join(
        (Path(n.data_dir) / "node.log").read_text() for n in lab.nodes.values()
    )
    assert "Traceback" not in logs
    assert "repair skips owner 'damaged', whose shard records cannot be read" in logs
