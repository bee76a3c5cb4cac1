"""The query's sink and what is read back from it: its batches and final state.

:class:`BatchSink` is the ``foreachBatch`` function: each micro-batch's rows
are written as parquet to ``<checkpoint_dir>/sink/batch_id=<n>`` (overwritten
when Spark runs the batch again), then, with a ring, its changed keys are
committed as an SR3 epoch (:class:`spark_bridge.ring.BatchCommitter`), then
the outputs of ``KafkaSink`` components go to Kafka
(:mod:`spark_bridge.kafka_sink`).
:func:`sink_batches` reads the batches back, and :func:`final_state` folds
the sink's state rows, newest batch last, into the format of ``sr3 state dump
--json``. The run report built from them is :mod:`spark_bridge.run_report`'s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from spark_bridge.errors import BatchLimitError, QueryPausedError, SparkBridgeError
from spark_bridge.kafka_sink import SparkKafkaSink, crash_point
from spark_bridge.ring import BatchCommitter
from spark_bridge.rows import EMIT, INFO, OFFSET, STATE
from sr3.codec import decode_key, decode_value
from sr3.key_state import ROUTE_FIELD

__all__ = [
    "SINK_DIR",
    "BatchSink",
    "final_state",
    "read_batch",
    "sink_batches",
]

#: The sink's directory under a run's checkpoint directory.
SINK_DIR: Final = "sink"
_BATCH_PREFIX: Final = "batch_id="


@dataclass
class BatchSink:
    """``foreachBatch`` function: parquet sink, then the ring commit."""

    sink_dir: Path
    committer: BatchCommitter | None
    spouts: frozenset[str]
    #: batch id -> seconds of the ring writes and commit
    sr3_seconds: dict[int, float] = field(default_factory=dict)
    #: batch id -> wall seconds of the whole foreachBatch call
    sink_seconds: dict[int, float] = field(default_factory=dict)
    infos: list[dict[str, Any]] = field(default_factory=list)
    #: micro-batches committed by this run
    committed: int = 0
    #: spouts whose offset rows are per Kafka partition (merged into the task's)
    kafka_spouts: frozenset[str] = frozenset()
    #: ``{"spout/index": {"topic:partition": next offset}}`` of those spouts
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    #: ``KafkaSink`` components: each committed batch's outputs go to Kafka
    kafka_sinks: Sequence[SparkKafkaSink] = ()
    #: the epoch the last committed batch was committed as (a re-run's)
    last_epoch: int | None = None
    #: micro-batches this run commits at most (``--max-batches``; None: no limit)
    limit: int | None = None
    #: added to Spark's batch id in the sink's directory names: a query started
    #: by a rebalance counts its batches from 0 again
    batch_offset: int = 0
    _gate: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _paused: bool = False
    _in_flight: bool = False

    def pause(self) -> None:
        """Take no more micro-batches (the one under way still commits)."""
        with self._gate:
            self._paused = True

    def resume(self, batch_offset: int) -> None:
        """Take micro-batches again, of a new query numbered from ``batch_offset``."""
        with self._gate:
            self._paused = False
            self.batch_offset = batch_offset

    def wait_idle(self) -> None:
        """Wait until no micro-batch is being written or committed (after pause)."""
        with self._gate:
            self._gate.wait_for(lambda: not self._in_flight)

    def next_batch_number(self) -> int:
        """The sink's lowest batch number above every batch it holds."""
        held = [batch for batch, _path in _batch_dirs(self.sink_dir)]
        return max(held, default=-1) + 1

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` as parquet, then commit it to the ring.

        Raises:
            BatchLimitError: the run committed its ``limit`` already; the
                query stops without this batch (Spark may start the next one
                before the run's stop reaches it).
            QueryPausedError: the run paused the query (a rebalance); the
                batch is not run, the next query reads it again.
        """
        if self.limit is not None and self.committed >= self.limit:
            msg = (
                f"micro-batch {batch_id} not run: this run stops after "
                f"{self.limit} committed micro-batches (--max-batches)"
            )
            raise BatchLimitError(msg)
        with self._gate:
            if self._paused:
                msg = f"micro-batch {batch_id} not run: the query is being restarted"
                raise QueryPausedError(msg)
            self._in_flight = True
        try:
            self._write(frame, batch_id)
        finally:
            with self._gate:
                self._in_flight = False
                self._gate.notify_all()

    def _write(self, frame: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        number = batch_id + self.batch_offset
        target = self.sink_dir / f"{_BATCH_PREFIX}{number}"
        frame.write.mode("overwrite").parquet(str(target))
        changes: dict[str, dict[bytes, bytes | None]] = {}
        offsets: dict[str, Any] = {}
        # only state, offset and info rows matter here: emits are most rows
        for row in read_batch(target, emits=False):
            kind = row["kind"]
            if kind == STATE:
                blob = row["state"]
                changes.setdefault(row["component"], {})[row["key"]] = blob
            elif kind == OFFSET and row["component"] in self.kafka_spouts:
                task = f"{row['component']}/{row['stream']}"
                merged = self.positions.setdefault(task, {})
                merged.update(decode_value(row["values"]))
                offsets[task] = dict(sorted(merged.items()))
            elif kind == OFFSET and row["component"] in self.spouts:
                offsets[f"{row['component']}/{row['stream']}"] = decode_value(
                    row["values"]
                )
            elif kind == INFO and row["state"] is not None:
                self.infos.append(dict(decode_value(row["state"])))
        epoch = batch_id + 1  # without a ring: Spark's batch is the epoch
        outputs = [k.outputs(target, batch_id) for k in self.kafka_sinks]
        if self.committer is not None:
            # the outputs go into the epoch too: a driver that dies before
            # their Kafka transaction leaves them for the next start
            pending = {
                k.owner: k.pending(out)
                for k, out in zip(self.kafka_sinks, outputs, strict=True)
            }
            report = self.committer.commit(batch_id, changes, offsets, pending)
            self.sr3_seconds[number] = report.seconds
            if report.epoch is not None:
                self.last_epoch = report.epoch
            epoch = self.last_epoch if self.last_epoch is not None else epoch
        crash_point(batch_id)
        for kafka_sink, out in zip(self.kafka_sinks, outputs, strict=True):
            kafka_sink.deliver(batch_id, epoch, target, out)
        self.sink_seconds[number] = time.perf_counter() - started
        self.committed += 1


def read_batch(directory: Path, *, emits: bool = True) -> list[dict[str, Any]]:
    """Return the rows of one batch directory (without emit rows unless ``emits``)."""
    rows: list[dict[str, Any]] = []
    for part in sorted(directory.glob("*.parquet")):
        table = pq.read_table(part)
        if not emits:
            table = table.filter(pc.field("kind") != EMIT)
        rows.extend(table.to_pylist())
    return rows


def _batch_dirs(sink_dir: Path) -> list[tuple[int, Path]]:
    """Return ``(batch number, directory)`` of every batch in ``sink_dir``, sorted."""
    if not sink_dir.is_dir():
        return []
    return sorted(
        (int(child.name.removeprefix(_BATCH_PREFIX)), child)
        for child in sink_dir.iterdir()
        if child.name.startswith(_BATCH_PREFIX)
    )


def sink_batches(sink_dir: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """Return ``(batch number, rows)`` of every batch in ``sink_dir``, oldest first.

    A batch's number is Spark's batch id, plus the batches of the queries
    before it in the same run (a rebalance starts a new query).
    """
    return [(batch, read_batch(path)) for batch, path in _batch_dirs(sink_dir)]


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    """Return a stored entry's fields, without the key's route (as a dump shows)."""
    if ROUTE_FIELD in entry:
        return {k: v for k, v in entry.items() if k != ROUTE_FIELD}
    return entry


def final_state(
    checkpoint_dir: str | Path, component: str | None = None
) -> dict[str, dict[str, Any]]:
    """Return a stateful bolt's state as the sink recorded it, as ``sr3 state dump``.

    Only keys changed by this checkpoint's batches are in the sink: a query
    that restored state from the ring has the rest in the ring
    (``sr3 state dump``).

    Args:
        checkpoint_dir: The ``checkpoint_dir`` the topology ran with.
        component: The stateful bolt (default: the only one with state rows).

    Returns:
        ``{json.dumps(list(key)): fields}``, sorted by key; deleted keys absent.

    Raises:
        SparkBridgeError: ``component`` is None and several bolts wrote state.
    """
    latest: dict[bytes, Any] = {}
    seen: set[str] = set()
    for _batch, rows in sink_batches(Path(checkpoint_dir) / SINK_DIR):
        for row in rows:
            if row["kind"] != STATE:
                continue
            seen.add(row["component"])
            if component is None or row["component"] == component:
                latest[row["key"]] = row["state"]
    if component is None and len(seen) > 1:
        msg = (
            f"{checkpoint_dir} holds the state of {sorted(seen)}; "
            "pass component= to choose one"
        )
        raise SparkBridgeError(msg)
    state = {
        json.dumps(list(decode_key(key))): _fields(decode_value(blob))
        for key, blob in latest.items()
        if blob is not None
    }
    return dict(sorted(state.items()))
