"""Savepoints: reprocessing with changed logic, engine hand-off, GC survival, bad input.

The topology (``topologies/savepoint_wc.py``) counts words; ``spwc.factor`` is
its "code change" (each word adds 1, or 10). A first run counts the first
:data:`AT_SAVEPOINT` words and ``sr3 savepoint create`` pins that epoch; a run
goes on past it; a run ``--from-savepoint`` with factor 10 must end with the
savepoint's counts plus ten times the counts of every word after it, exactly.
Real ZooKeeper, three real ring node processes (r = 3), the Storm engine's
local cluster in-process (``sr3`` as a subprocess for the savepoint commands and
the refusals) and the shared local[2] Spark session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.access import RingAccess
from backend.committer import StartPoint
from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions
from storm_bridge.runner import run_topology as run_storm
from tests.e2e.conftest import require_zk, sr3, sr3_json
from tests.e2e.topologies.savepoint_wc import counts
from tests.integration.conftest import running_lab
from zk.checkpoints import CommitRecord

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "savepoint_wc.py"
NAME = "savepoint_wc"
NODES = 3
AT_SAVEPOINT = 150
PAST_SAVEPOINT = 300
ALL = 450
BEYOND = 520
FAST = {"sr3.checkpoint.interval.s": 0.2, "sr3.idle.quiet.s": 0.5}
#: after the savepoint, the old logic's counts and the new logic's over the rest
REPROCESSED = counts(0, AT_SAVEPOINT) + counts(AT_SAVEPOINT, ALL, factor=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module: runs are sequential."""
    require_zk()
    root = tmp_path_factory.mktemp("savepoint-lab") / "lab"
    with running_lab(root, NODES) as running:
        yield running


@pytest.fixture(scope="module")
def ring(lab: Lab) -> Iterator[RingAccess]:
    access = RingAccess(lab.config(Sr3Config.from_env()))
    try:
        yield access
    finally:
        access.close()


def storm(ring: RingAccess, limit: int, **options: Any) -> dict[str, Any]:
    """Run the topology until idle over the first ``limit`` words."""
    conf = {**FAST, "spwc.limit": limit, **options.pop("conf", {})}
    environment = options.pop("environment", "p2")
    run = RunOptions(until_idle=True, conf=conf, environment=environment, **options)
    report = run_storm(TOPOLOGY, ring=ring, options=run).to_dict()
    assert report["idle"], report
    return report


def state(ring: RingAccess) -> dict[str, int]:
    """Return the committed counts, ``{word: n}``."""
    _epoch, rows = ring.committed_state(NAME, "count")
    return {key[0]: fields["n"] for key, fields in rows.items()}


def restored(ring: RingAccess, record: CommitRecord) -> dict[str, int]:
    """Restore every owner of ``record`` straight from the ring; merge the counts."""
    found: dict[str, int] = {}
    for owner in record.owners:
        groups = ring.manifests.manifest(owner, record.epoch).key_group_count
        keyed, _report = ring.restorer.restore(
            owner, record, key_group_count=groups, mechanism="star"
        )
        for key, _route, fields in keyed.routed_items():
            assert key[0] not in found, key  # each key held by one owner
            found[key[0]] = fields["n"]
    return found


def published(ring: RingAccess) -> int:
    """Return the highest epoch any owner of the topology published."""
    return max(
        max(ring.manifests.epochs(o), default=0)
        for o in ring.manifests.owners()
        if o.startswith(f"{NAME}/")
    )


@pytest.fixture(scope="module")
def saved(lab: Lab, ring: RingAccess) -> dict[str, Any]:
    """Count the first words, pin that epoch as ``v1``, count further on.

    The first run is throttled over several epochs, so epochs before the
    savepoint's exist and are collected (the refusals name one).
    """
    storm(ring, AT_SAVEPOINT, conf={"spwc.pause.s": 0.01})
    assert state(ring) == counts(0, AT_SAVEPOINT)
    point = sr3_json(lab, "savepoint", "create", NAME, "--name", "v1")
    assert point["name"] == "v1"
    assert point["record"]["epoch"] > 1, point  # epoch 1 is not v1's
    assert point["record"]["offsets"] == {"words/0": AT_SAVEPOINT - 1}
    storm(ring, PAST_SAVEPOINT, resume=True)
    assert state(ring) == counts(0, PAST_SAVEPOINT)
    return point


def test_reprocessing_from_a_savepoint_with_changed_logic(
    lab: Lab, ring: RingAccess, saved: dict[str, Any]
) -> None:
    listed = sr3_json(lab, "savepoint", "list", NAME)
    assert [(p["name"], p["record"]["epoch"]) for p in listed] == [
        ("v1", saved["record"]["epoch"])
    ]
    above = published(ring)
    # the changed logic, at another parallelism (2 -> 3 tasks)
    report = storm(
        ring,
        ALL,
        conf={"spwc.factor": 10},
        environment="p3",
        start_from=StartPoint(savepoint="v1"),
    )
    assert state(ring) == dict(REPROCESSED), report["state"]
    record = ring.committed(NAME)
    assert record is not None
    assert record.epoch > above  # no epoch number of before is reused
    assert sorted(record.owners) == [f"{NAME}/count/{i}" for i in range(3)]


@pytest.mark.spark
def test_a_savepoint_taken_on_storm_starts_on_spark_and_back(
    spark: Any, lab: Lab, ring: RingAccess, saved: dict[str, Any], tmp_path: Path
) -> None:
    from spark_bridge.runner import run_topology as run_spark  # noqa: PLC0415

    report = run_spark(
        TOPOLOGY,
        checkpoint_dir=tmp_path / "ck",
        spark=spark,
        ring=ring,
        conf={**FAST, "spwc.limit": ALL, "spwc.factor": 10},
        environment="p2",
        start_from=StartPoint(savepoint="v1"),
    )
    assert report["idle"], report
    assert report["started_from"].startswith("ring epoch"), report["started_from"]
    assert state(ring) == dict(REPROCESSED)
    # and back: a savepoint of the epoch Spark committed starts the Storm engine,
    # at another parallelism, over the words after it
    point = sr3_json(lab, "savepoint", NAME, "--name", "from-spark")
    try:
        storm(
            ring,
            BEYOND,
            conf={"spwc.factor": 10},
            environment="p3",
            start_from=StartPoint(savepoint="from-spark"),
        )
        assert point["record"]["epoch"] < ring.committed(NAME).epoch
        assert state(ring) == dict(REPROCESSED + counts(ALL, BEYOND, factor=10))
    finally:
        sr3(lab, "savepoint", "delete", NAME, "from-spark")


def test_bad_starts_are_refused_and_change_nothing(
    lab: Lab, ring: RingAccess, saved: dict[str, Any], tmp_path: Path
) -> None:
    ring.savepoints.create(
        "elsewhere", "theirs", CommitRecord(epoch=3, owners=("elsewhere/count/0",))
    )
    renamed = tmp_path / f"{NAME}.py"  # same stem, the counter renamed
    renamed.write_text(
        TOPOLOGY.read_text(encoding="utf-8").replace("count = Count", "tally = Count"),
        encoding="utf-8",
    )
    before = ring.committed(NAME)
    run = ("run", "--until-idle", "-e", "p2")
    refusals = [
        ((*run, str(TOPOLOGY), "--from-savepoint", "nope"), ["'nope'", "'v1'"]),
        ((*run, str(TOPOLOGY), "--from-epoch", "1"), ["epoch 1", "savepoint 'v1'"]),
        (
            (*run, str(TOPOLOGY), "--from-savepoint", "theirs"),
            ["'theirs'", "'elsewhere'", f"not to {NAME!r}"],
        ),
        (
            (*run, str(renamed), "--from-savepoint", "v1"),
            ["'count'", "'tally'", "rename"],
        ),
        (
            (*run, str(TOPOLOGY), "--from-savepoint", "v1", "--from-epoch", "1"),
            ["not allowed with"],
        ),
        (("savepoint", "delete", NAME, "nope"), ["'nope'", "'v1'"]),
        (("savepoint", "create", NAME, "--name", "v1"), ["'v1' already"]),
    ]
    for args, words in refusals:
        proc = sr3(lab, *args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)  # noqa: PLR2004
        for word in words:
            assert word in proc.stderr, (args, word, proc.stderr)
        assert ring.committed(NAME) == before, args
    assert [p.name for p in ring.savepoints.savepoints(NAME)] == ["v1"]


def test_a_savepoint_survives_later_epochs_compactions_and_node_loss(
    lab: Lab, ring: RingAccess, saved: dict[str, Any]
) -> None:
    point = ring.savepoints.get(NAME, "v1")
    assert point is not None
    record = point.record
    first = ring.committed(NAME)
    # every epoch a full snapshot: each commit collects what came before
    storm(
        ring,
        PAST_SAVEPOINT,
        conf={"sr3.checkpoint.max.chain.length": 1, "spwc.pause.s": 0.01},
    )
    last = ring.committed(NAME)
    assert first is not None and last is not None
    assert last.epoch - first.epoch >= 5  # noqa: PLR2004 (many epochs)
    for owner in record.owners:
        epochs = ring.manifests.epochs(owner)
        assert record.epoch in epochs, (owner, epochs)
        # every shard of the savepoint's chain is still recorded
        listed = ring.manifests.manifest(owner, record.epoch).shard_ids
        assert set(listed) <= set(ring.manifests.shards(owner)), owner
    # r - 1 = 2 of the 3 nodes die: the savepoint restores from the third
    lab.kill_nodes(sorted(lab.nodes)[:2])
    assert restored(ring, record) == dict(counts(0, AT_SAVEPOINT))
    # deleting unpins: the commit after it collects the savepoint's epoch
    assert sr3(lab, "savepoint", "delete", NAME, "v1").returncode == 0
    assert ring.savepoints.savepoints(NAME) == []
