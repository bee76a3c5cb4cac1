"""Star, line and tree recovery against a real lab, with holders SIGKILLed mid-transfer.

One lab of five ring nodes (r=3) serves the module; relay frames are paced by the
test-only ``SR3_TEST_RELAY_FAULTS`` knob so a kill issued when R receives its first
bytes lands while the structure is still streaming. Killed nodes are restarted on
their data dirs after each case.
"""

from __future__ import annotations

import random
import signal
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from backend.chain import ChainPolicy
from sr3.manifest import Manifest
from sr3.recovery import Recoverer, RecoveryContext, RecoveryResult
from sr3.snapshot import SnapshotWriter
from sr3.state import KeyedState
from sr3_cli.cluster import Cluster, open_cluster
from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from tests.e2e.conftest import require_zk, sr3, sr3_json

pytestmark = [pytest.mark.zk, pytest.mark.slow]

G = 64
SHARD_BYTES = 16 * 1024
Model = dict[tuple[Any, ...], dict[str, Any]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_zk()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SR3_TEST_RELAY_FAULTS", "delay_s=0.004")
        lab = Lab(root=tmp_path_factory.mktemp("recovery") / "lab")
        lab.root.mkdir(parents=True)
        lab.save()
        try:
            lab.start_zookeeper()
            lab.add_nodes(5)
            lab.start_nodes(sorted(lab.nodes))
            wait_for_members(lab, 5)
            yield lab
        finally:
            lab.stop_nodes()
            lab.stop_zookeeper()


@pytest.fixture
def cluster(lab: Lab) -> Iterator[Cluster]:
    with open_cluster(lab.config()) as c:
        yield c


def write_history(
    cluster: Cluster,
    owner: str,
    *,
    seed: int,
    epochs: int,
    max_chain_length: int = 8,
    check: Any = None,
) -> Model:
    """Random upserts and deletes through KeyedState, one incremental epoch each."""
    rng = random.Random(seed)
    keys = rng.randint(800, 2500)
    writer = SnapshotWriter(
        store=cluster.store,
        manifests=cluster.manifests,
        max_shard_bytes=SHARD_BYTES,
        collect_garbage=True,
    )
    policy = ChainPolicy(max_chain_length)
    state = KeyedState(G)
    model: Model = {}
    for epoch in range(1, epochs + 1):
        for _ in range(keys if epoch == 1 else rng.randint(0, keys // 3)):
            key = ("u", rng.randrange(keys))
            if epoch > 1 and rng.random() < 0.2:
                state.for_key(key).clear()
                model.pop(key, None)
            else:
                value = {"v": rng.randbytes(rng.randint(1, 300)), "e": epoch}
                state.for_key(key).update(value)
                model[key] = value
        kind = policy.kind_at(cluster.manifests.latest(owner), epoch)
        writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=G,
            key_groups=state.snapshot(incremental=kind == "delta").items(),
            kind=kind,
        )
        state.mark_clean()
        if check is not None:
            check(epoch, model)
    return model


def recoverer(cluster: Cluster) -> Recoverer:
    context = RecoveryContext(
        manifests=cluster.manifests,
        members=cluster.membership.members,
        pool=cluster.pool,
        node_config=cluster.config.node,
    )
    return Recoverer(context)


def contents(result: RecoveryResult) -> Model:
    return dict(result.state.items())


def victims(mechanism: str, structure: dict[str, Any], count: int) -> list[str]:
    """Pick holders whose death hurts: relays in the middle and at the end."""
    nodes: list[str] = structure["nodes"]
    if mechanism == "star":
        busiest = sorted(nodes, key=lambda n: -len(structure["assignment"][n]))
        return busiest[:count]
    if mechanism == "line":  # a middle relay first, then the chain's end (R's peer)
        # the chain holds only the covering holders, often just two
        chain = [nodes[(len(nodes) - 1) // 2], nodes[-1]]
        return list(dict.fromkeys(chain))[:count]
    return [nodes[1], nodes[0]][:count]  # tree: an interior node, then the root


@pytest.mark.parametrize("failures", [0, 1, 2])
@pytest.mark.parametrize("mechanism", ["star", "line", "tree"])
def test_recovery_is_exact_with_holders_killed_mid_transfer(
    lab: Lab, cluster: Cluster, mechanism: str, failures: int
) -> None:
    seed = zlib.crc32(f"{mechanism}/{failures}".encode())
    owner = f"kill/{mechanism}/{failures}"
    model = write_history(
        cluster, owner, seed=seed, epochs=random.Random(seed).randint(2, 5)
    )
    killed: list[str] = []
    plan: dict[str, Any] = {}

    def on_event(kind: str, info: Any) -> None:
        if kind == "plan" and not plan:
            plan.update(info["structure"])
        if kind == "data" and failures and not killed:
            killed.extend(victims(mechanism, plan, failures))
            lab.kill_nodes(killed, signal.SIGKILL)

    try:
        result = recoverer(cluster).recover(
            owner, mechanism=mechanism, on_event=on_event
        )
    finally:
        if killed:
            lab.start_nodes(killed)
            wait_for_members(lab, 5)
    print(
        f"\n{mechanism} killed={killed} failed={result.failed_holders} "
        f"replans={result.replans} dups={result.duplicates} "
        f"timeline={[(s.phase, s.detail[:30]) for s in result.timeline]}"
    )
    assert result.mechanism == mechanism
    assert contents(result) == model
    manifest = cluster.manifests.latest(owner)
    assert manifest is not None and result.epoch == manifest.epoch
    assert len(killed) == failures
    if failures:
        assert set(killed) & set(result.failed_holders), result.to_dict()
    phases = [s.phase for s in result.timeline]
    assert phases[0] == "plan" and phases[-2:] == ["install", "resume"]
    assert result.time_to_resume_s >= result.transfer_s > 0


@pytest.mark.parametrize("mechanism", ["line", "tree"])
def test_relays_use_a_covering_subset_of_the_holders(
    lab: Lab, cluster: Cluster, mechanism: str
) -> None:
    owner = f"cover/{mechanism}"
    model = write_history(cluster, owner, seed=7, epochs=3)
    plans: list[dict[str, Any]] = []

    def on_event(kind: str, info: Any) -> None:
        if kind == "plan":
            plans.append(info["structure"])

    result = recoverer(cluster).recover(owner, mechanism=mechanism, on_event=on_event)
    assert contents(result) == model and result.replans == 0
    manifest = cluster.manifests.latest(owner)
    assert manifest is not None
    metas = cluster.manifests.shards(owner)
    (plan,) = plans
    nodes, assignment = plan["nodes"], plan["assignment"]
    # r=3 over 5 nodes: every shard is on any 3 of them, so 3 at most suffice
    assert 1 <= len(nodes) <= 3 < len(lab.nodes)
    assigned = sorted(s for shards in assignment.values() for s in shards)
    assert assigned == sorted(manifest.shard_ids)
    for node_id, shards in assignment.items():
        assert node_id in nodes
        assert all(node_id in metas[s].holders for s in shards)


def test_twenty_epochs_compact_collect_and_recover_the_last_one(
    lab: Lab, cluster: Cluster
) -> None:
    owner = "history/20"
    bound = 3
    chains: list[int] = []
    checked: dict[int, Model] = {}

    def check(epoch: int, model: Model) -> None:
        latest = cluster.manifests.latest(owner)
        assert latest is not None and latest.epoch == epoch
        chains.append(latest.chain_length)
        assert latest.chain_length - 1 <= bound
        assert min(cluster.manifests.epochs(owner)) == latest.base_epoch
        if epoch % 7 == 0:
            checked[epoch] = dict(model)
            mech = ("star", "line", "tree")[epoch // 7 % 3]
            got = recoverer(cluster).recover(owner, mechanism=mech)
            assert got.epoch == epoch and contents(got) == model

    model = write_history(
        cluster, owner, seed=20, epochs=20, max_chain_length=bound, check=check
    )
    assert max(chains) == bound + 1 and chains.count(1) >= 4
    assert len(checked) == 2
    latest: Manifest | None = cluster.manifests.latest(owner)
    assert latest is not None and latest.epoch == 20
    for mechanism in ("star", "line", "tree", "auto"):
        got = recoverer(cluster).recover(owner, mechanism=mechanism)
        assert got.epoch == 20 and contents(got) == model
    # garbage collection left only the current chain's shards on the ring
    live_shards = set(latest.shard_ids)
    assert set(cluster.manifests.shards(owner)) == live_shards
    for node in cluster.membership.members().values():
        with cluster.pool.client(node) as client:
            stored = {r.shard_id for r in client.list(owner)}
        assert stored <= live_shards


def test_eager_and_lazy_install_rebuild_the_same_state(cluster: Cluster) -> None:
    owner = "install/modes"
    model = write_history(cluster, owner, seed=7, epochs=3)
    lazy = recoverer(cluster).recover(owner, mechanism="tree", lazy=True)
    eager = recoverer(cluster).recover(owner, mechanism="tree", lazy=False)
    assert lazy.state.stats().encoded_key_groups > 0
    assert eager.state.stats().encoded_key_groups == 0
    assert contents(lazy) == contents(eager) == model


def test_cli_get_reports_mechanism_reason_and_timeline(lab: Lab) -> None:
    put = sr3_json(
        lab,
        "snapshot",
        "put",
        "--owner",
        "cli",
        "--size",
        "2MB",
        "--epochs",
        "6",
        "--update-fraction",
        "0.3",
        "--max-chain-length",
        "2",
    )
    assert [e["kind"] for e in put["epochs"]] == [
        "full",
        "delta",
        "delta",
        "full",
        "delta",
        "delta",
    ]
    for mechanism in ("star", "line", "tree", "auto"):
        got = sr3_json(
            lab,
            "snapshot",
            "get",
            "--owner",
            "cli",
            "--mechanism",
            mechanism,
            "--verify",
        )
        assert got["verify"]["ok"], got["verify"]
        assert got["verify"]["keys"] == got["verify"]["expected_keys"]
        assert got["epoch"] == 6 and got["mechanism"] in ("star", "line", "tree")
        assert got["reason"] and got["time_to_resume_s"] > 0
        assert {"owner", "shards", "bytes", "seconds", "mb_per_s", "served_by"} <= set(
            got
        )
        assert [s["phase"] for s in got["timeline"]][-2:] == ["install", "resume"]
    text = sr3(lab, "snapshot", "get", "--owner", "cli", "--mechanism", "tree").stdout
    assert "recovered cli@6 by tree" in text and "phase" in text


def test_gc_keeps_the_chain_of_the_committed_epoch(cluster: Cluster) -> None:
    owner = "gc/committed"
    writer = SnapshotWriter(
        store=cluster.store,
        manifests=cluster.manifests,
        max_shard_bytes=SHARD_BYTES,
    )
    policy = ChainPolicy(max_deltas=1)
    state = KeyedState(G)
    for epoch in range(1, 7):  # chains: 1-2, 3-4, 5-6
        state.for_key(("g", epoch)).update({"v": epoch})
        kind = policy.kind_at(cluster.manifests.latest(owner), epoch)
        report = writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=G,
            key_groups=state.snapshot(incremental=kind == "delta").items(),
            kind=kind,
        )
        state.mark_clean()
        assert report.gc is None  # not collected without opting in
    assert cluster.manifests.epochs(owner) == [1, 2, 3, 4, 5, 6]
    gc = writer.collect_garbage(owner, committed_epoch=4)
    assert gc.epochs == [1, 2] and gc.replicas_deleted > 0
    assert cluster.manifests.epochs(owner) == [3, 4, 5, 6]
    rolled_back = recoverer(cluster).recover(owner, mechanism="line", epoch=4)
    assert contents(rolled_back) == {("g", e): {"v": e} for e in range(1, 5)}
