"""Where a Spark run of a topology starts: its Spark checkpoint, the ring, or empty.

Starting points, as ``sr3 run`` on the Storm engine:

- a Spark checkpoint with progress: Spark resumes from it (its state store);
  the ring must hold this query's own last commit, else the state moved on
  under another run and the checkpoint is refused;
- an empty checkpoint with ``resume``: state is restored from the ring's
  committed epoch through star, line or tree recovery and the spouts start at
  its offsets, whichever engine committed it (the engine hand-off);
- an empty checkpoint without ``resume``: empty state, an empty epoch is
  committed above every epoch published before.

:func:`plan_start` decides which, opens the run's
:class:`~spark_bridge.ring.BatchCommitter` and, for a restore, the restore
source's frame; :mod:`spark_bridge.runner` starts the query from it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession

from backend.access import RingAccess
from backend.chain import ChainPolicy
from backend.committer import EpochCommitter, StartPoint
from backend.owners import writer_name
from spark_bridge.compiler import Plan
from spark_bridge.errors import SparkBridgeError
from spark_bridge.ring import (
    RESTORE_SOURCE,
    BatchCommitter,
    RestoreSource,
    restore_options,
)
from spark_bridge.ring_owners import stateful_owners
from sr3.config import Sr3Config
from topology_api.java_hash import IntegerBoxing
from topology_api.kafka.writers import SPARK_WRITER
from topology_api.topology import LoadedTopology
from zk.checkpoints import CommitRecord

__all__ = ["SPARK_DIR", "QueryStart", "plan_start"]

#: Spark's own checkpoint, under the run's checkpoint dir.
SPARK_DIR: Final = "spark"
_QUERY_FILE: Final = "sr3-query.json"
_SECRET_FILE: Final = "sr3-secret"  # noqa: S105 (a file name)


def _has_progress(spark_dir: Path) -> bool:
    commits = spark_dir / "commits"
    return commits.is_dir() and any(
        p.name.isdigit() for p in commits.iterdir() if p.is_file()
    )


def _query_id(root: Path, *, progress: bool) -> str:
    path = root / _QUERY_FILE
    if progress and path.is_file():
        return str(json.loads(path.read_text(encoding="utf-8"))["query"])
    query = str(uuid.uuid4())
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"query": query}), encoding="utf-8")
    return query


def _secret_file(root: Path, ring: RingAccess) -> Path | None:
    secret = ring.config.node.secret
    if not secret:
        return None
    path = root / _SECRET_FILE
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(secret, encoding="utf-8")
    return path


@dataclass
class QueryStart:
    """How a run starts: its committer, the committed record, offsets, extra frames.

    Attributes:
        committer: Commits each micro-batch as an epoch (None without a ring).
        record: The ring's committed record the run continues from, if any.
        start_offsets: The committed spout offsets to start at (None: none).
        extra: Frames unioned with the spouts' (the ring restore's rows).
        how: The report's ``started_from``.
        query: This query's id, kept with the Spark checkpoint.
    """

    committer: BatchCommitter | None = None
    record: CommitRecord | None = None
    start_offsets: dict[str, Any] | None = None
    extra: list[DataFrame] = field(default_factory=list)
    how: str = "empty"
    query: str | None = None


def plan_start(  # noqa: PLR0913 (the start's inputs)
    session: SparkSession,
    topology: LoadedTopology,
    plan: Plan,
    conf: Mapping[str, Any],
    root: Path,
    ring: RingAccess | None,
    *,
    resume: bool,
    start_from: StartPoint | None = None,
) -> QueryStart:
    """Decide where the run starts; open its committer and any restore frame.

    Raises:
        SparkBridgeError: the Spark checkpoint and the ring disagree, or
            ``start_from`` comes with no ring or a used Spark checkpoint.
        ConfigError: ``start_from`` cannot be restored (nothing changed).
    """
    progress = _has_progress(root / SPARK_DIR)
    if start_from is not None and (ring is None or progress):
        msg = (
            f"starting topology {topology.name!r} from {start_from} needs a ring "
            "and an empty Spark checkpoint; "
            + (
                "pass a ring (sr3.zk.hosts)"
                if ring is None
                else f"pass a fresh --checkpoint-dir (not {root})"
            )
        )
        raise SparkBridgeError(msg)
    if ring is None:
        return QueryStart(
            how="spark checkpoint" if progress else "empty",
            query=_query_id(root, progress=progress),
        )
    owners = stateful_owners(topology, plan.stateful, conf)
    settings = Sr3Config.merged(topology.config, conf)
    if start_from is not None:
        # checked before the query id is written: a refused start changes nothing
        EpochCommitter(ring, topology.name, background=False).start(
            start_from=start_from, components=plan.stateful
        )
    query = _query_id(root, progress=progress)
    if not progress and not resume and start_from is None:
        EpochCommitter(ring, topology.name, background=False).start()
    committer = BatchCommitter(
        access=ring,
        topology=topology,
        owners=owners,
        query_id=query,
        policy=ChainPolicy(settings.recovery.max_chain_length),
        boxing=IntegerBoxing.of({**topology.config, **conf}),
        retain=settings.checkpoint.retain,
        outputs=[writer_name(topology.name, n, SPARK_WRITER) for n in plan.kafka_sinks],
    )
    record = committer.open()
    start = QueryStart(committer=committer, record=record, query=query)
    if progress:
        extra = dict(record.extra) if record is not None else {}
        if record is not None and record.epoch > 0 and extra.get("query") != query:
            engine = extra.get("engine", "storm")
            msg = (
                f"topology {topology.name!r}: the ring's committed epoch "
                f"{record.epoch} was written by another run ({engine} engine) "
                f"after this Spark checkpoint ({root / SPARK_DIR}); resuming it "
                "would lose that state. Delete the checkpoint directory (or pass "
                "another one) to restore from the ring"
            )
            raise SparkBridgeError(msg)
        start.how = "spark checkpoint"
        return start
    if record is None or record.epoch == 0 or not record.owners:
        start.start_offsets = dict(record.offsets) if record is not None else None
        start.how = "empty"
        return start
    start.start_offsets = dict(record.offsets)
    session.dataSource.register(RestoreSource)
    ring_conf = {
        k: v for k, v in ring.config.to_mapping().items() if k != "sr3.node.secret"
    }
    options = restore_options(
        record=record,
        owners=owners,
        ring_conf=ring_conf,
        secret_file=_secret_file(root, ring),
    )
    start.extra.append(
        session.readStream.format(RESTORE_SOURCE).options(**options).load()
    )
    start.how = f"ring epoch {record.epoch}"
    return start
