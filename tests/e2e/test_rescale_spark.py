"""Rescaling on the Spark engine, and hand-offs between engines at other parallelism.

The topology (``topologies/state_keys.py``) has two counters behind
``fields("user")``: ``per_user`` keyed by the grouping values, ``per_page``
whose ``state_key`` is ``(user, page)`` and which stores each key's route.
Each step runs it with more events at another parallelism (``environment``
``pN``), on Spark (an empty Spark checkpoint) or on the Storm engine, resuming
from the ring's committed epoch the step before wrote: the committed state of
both counters must be the exact counts, with one owner per task and each key
held once, by the task its tuples go to. Spark rescales its own state and
Storm's, and Storm rescales Spark's. Real ZooKeeper, real ring node processes,
the shared local[2] Spark session (in-process runs: ``environment`` reaches
every Spark task) and the Storm engine's local cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from backend.access import RingAccess
from spark_bridge.runner import run_topology as run_spark
from sr3.config import Sr3Config
from storm_bridge.runner import RunOptions
from storm_bridge.runner import run_topology as run_storm
from tests.e2e.conftest import require_zk
from tests.e2e.topologies.state_keys import PAR, expected
from tests.integration.conftest import running_lab
from topology_api.java_hash import key_task_index, route_hash
from zk.checkpoints import CommitRecord

pytestmark = [pytest.mark.zk, pytest.mark.spark, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "state_keys.py"
NAME = "state_keys"

#: (engine, environment, events so far): parallelism 2 -> 3 -> 1 -> 4 -> 2,
#: every step from the committed epoch of the one before, whichever engine
STEPS = (
    ("spark", "p2", 300),
    ("spark", "p3", 600),
    ("storm", "p1", 900),
    ("spark", "p4", 1200),
    ("storm", "p2", 1500),
)


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RingAccess]:
    """A 3-node lab shared by the module, and handles on it."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("rescale-spark-lab") / "lab") as lab:
        access = RingAccess(lab.config(Sr3Config.from_env()))
        try:
            yield access
        finally:
            access.close()


def dump(ring: RingAccess, component: str) -> dict[str, Any]:
    """Return the committed state as ``sr3 state dump --json`` prints it."""
    _epoch, state = ring.committed_state(NAME, component)
    return {json.dumps(list(key)): fields for key, fields in state.items()}


def as_dump(counts: Counter[Any]) -> dict[str, Any]:
    """Return exact counts as :func:`dump` gives them."""
    return {
        json.dumps(list(key) if isinstance(key, tuple) else [key]): {"n": n}
        for key, n in counts.items()
    }


def assert_placed(ring: RingAccess, component: str, tasks: int, where: str) -> None:
    """Every key of ``component`` is held once, by the task its tuples go to."""
    record = ring.committed(NAME)
    assert record is not None
    owners = sorted(o for o in record.owners if o.startswith(f"{NAME}/{component}/"))
    assert len(owners) == tasks, (where, owners)
    held: Counter[tuple[Any, ...]] = Counter()
    for owner in owners:
        index = int(owner.rpartition("/")[2])
        groups = ring.manifests.manifest(owner, record.epoch).key_group_count
        state, _report = ring.restorer.restore(
            owner,
            CommitRecord(epoch=record.epoch, owners=(owner,)),
            key_group_count=groups,
            mechanism="star",
        )
        for key, route, _fields in state.routed_items():
            held[key] += 1
            # per_page keys store their route (the user's), per_user keys none
            assert route == (route_hash([key[0]]) if len(key) > 1 else None), key
            assert key_task_index(key, route, tasks) == index, (where, owner, key)
    assert max(held.values()) == 1, (where, held.most_common(3))


def assert_exact(ring: RingAccess, step: str, tasks: int, events: int) -> None:
    """Both counters hold the exact counts of ``events``, each key on its task."""
    users, pages = expected(events)
    where = f"after {step} ({events} events)"
    assert dump(ring, "per_user") == as_dump(users), where
    assert dump(ring, "per_page") == as_dump(pages), where
    for component in ("per_user", "per_page"):
        assert_placed(ring, component, tasks, where)


def spark_step(  # noqa: PLR0913 (one step's options)
    spark: SparkSession,
    ring: RingAccess,
    checkpoint: Path,
    environment: str,
    events: int,
    *,
    resume: bool,
    rows: int = 1000,
) -> dict[str, Any]:
    report = run_spark(
        TOPOLOGY,
        checkpoint_dir=checkpoint,
        spark=spark,
        ring=ring,
        conf={"statekeys.events": events},
        max_rows_per_batch=rows,
        resume=resume,
        environment=environment,
    )
    assert report["idle"], report
    return report


def storm_step(
    ring: RingAccess, environment: str, events: int, *, resume: bool
) -> dict[str, Any]:
    options = RunOptions(
        until_idle=True,
        environment=environment,
        conf={"statekeys.events": events, "sr3.checkpoint.interval.s": 0.3},
        resume=resume,
    )
    report = run_storm(TOPOLOGY, ring=ring, options=options).to_dict()
    assert report["idle"], report
    return report


def test_state_keys_stay_exact_through_2_3_1_4_2_tasks_across_engines(
    spark: SparkSession, ring: RingAccess, tmp_path: Path
) -> None:
    for step, (engine, environment, events) in enumerate(STEPS):
        resume = step > 0
        if engine == "storm":
            storm_step(ring, environment, events, resume=resume)
        else:
            # spark p3: two micro-batches, the rescaled first rewrites every
            # task in full and the second is a delta
            rows = 250 if environment == "p3" else 1000
            checkpoint = tmp_path / f"ck{step}"
            report = spark_step(
                spark, ring, checkpoint, environment, events, resume=resume, rows=rows
            )
            if resume:
                assert report["started_from"].startswith("ring epoch"), report
            batches = 2 if environment == "p3" else 1
            assert report["checkpoints"]["count"] == batches, report["checkpoints"]
        assert_exact(ring, f"{engine} {environment}", PAR[environment], events)
