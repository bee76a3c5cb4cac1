"""A replayable spout as a Python streaming data source.

Spark's offsets are the spout's offsets. The driver-side reader keeps one
hosted spout per spout task: for each micro-batch it calls ``next_tuple`` up to
the batch bound (or until a call emits nothing) and reports, per task, the
offset of the last emit as the end offset. Executors replay the range: the
spout is sought to the start offset and ``next_tuple`` is called until it emits
the end offset, so a batch re-run after a failure reads the same tuples. A
Python worker keeps the spouts it hosted (Spark reuses workers across tasks),
so ``initialize`` runs once per worker and task index, not once per batch.

Offsets are kept as ``{task index: JSON of the spout offset}`` (``"null"``
before the first emit), so any JSON-able spout offset fits Spark's offset log.
The ``startOffsets`` option (JSON ``{"spout/task index": offset}``, as SR3
commit records store spout offsets) makes the listed tasks start after those
offsets instead. Each partition's rows end with an ``offset`` row carrying the
task's end offset (and, as its state, the partition's tuple count); the
``k``-th emit of task ``t`` has seq ``f"{k:09d}.{t:04d}"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from spark_bridge.errors import ComponentError, ReplayError
from spark_bridge.rows import EMIT, OFFSET, ROW_SCHEMA, ComponentRef
from spark_bridge.spout_host import SpoutHost
from spark_bridge.worker import spark_task, topology_of
from sr3.codec import encode_value
from sr3.errors import CodecError

__all__ = [
    "MAX_ROWS_OPTION",
    "SOURCE_NAME",
    "START_OFFSETS_OPTION",
    "SpoutSource",
    "SpoutStreamReader",
]

#: Format name the source is registered under.
SOURCE_NAME: Final = "sr3_spout"
#: Option bounding the tuples of one micro-batch (all spout tasks together).
MAX_ROWS_OPTION: Final = "maxRowsPerBatch"
#: Option: JSON ``{"spout/task index": offset}`` of tasks not starting at the start.
START_OFFSETS_OPTION: Final = "startOffsets"
_DEFAULT_MAX_ROWS: Final = 1000
#: Spouts a Python worker keeps for later reads, at most.
_KEPT_HOSTS: Final = 16
#: (topology path, environment, parallelism, component, conf JSON, task index)
#: -> spout hosted by a read (its task id depends on every component's parallelism)
_read_hosts: dict[
    tuple[str, str | None, tuple[tuple[str, int], ...], str, str, int], SpoutHost
] = {}


@dataclass(frozen=True)
class SpoutPartition(InputPartition):
    """The offset range of one spout task in one micro-batch (JSON offsets)."""

    index: int
    start: str
    end: str


class SpoutStreamReader(DataSourceStreamReader):
    """Plans micro-batches on the driver and replays them on executors."""

    def __init__(
        self,
        ref: ComponentRef,
        max_rows: int,
        start_offsets: Mapping[str, Any] | None = None,
    ) -> None:
        self._ref = ref
        self._max_rows = max_rows
        self._start = dict(start_offsets or {})
        self._hosts: dict[int, SpoutHost] = {}

    def _tasks(self) -> int:
        topology = topology_of(self._ref)
        return topology.components[self._ref.component].tasks

    def _host(self, index: int) -> SpoutHost:
        host = self._hosts.get(index)
        if host is None:
            topology = topology_of(self._ref)
            host = SpoutHost(topology, self._ref.component, index, self._ref.conf)
            self._hosts[index] = host
        return host

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        """Return each task's start: its ``startOffsets`` entry, else ``null``."""
        name = self._ref.component
        return {
            str(i): json.dumps(self._start.get(f"{name}/{i}"))
            for i in range(self._tasks())
        }

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        """Bound micro-batches by the ``maxRowsPerBatch`` option (0: unbounded)."""
        return ReadMaxRows(self._max_rows) if self._max_rows > 0 else ReadAllAvailable()

    def latestOffset(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any], limit: ReadLimit
    ) -> dict[str, Any]:
        """Drive each spout task up to its share of ``limit``; return end offsets.

        Spark plans a batch once the one before it committed, so ``start`` is
        committed: the spout first gets ``ack(tup_id)`` for each of its emits
        with a message id up to ``start``, as Storm acks a spout tuple once its
        tree completes.

        Raises:
            ComponentError: the spout's ``ack`` raised.
        """
        tasks = self._tasks()
        bound = math.inf
        if isinstance(limit, ReadMaxRows):
            bound = max(1, math.ceil(limit.max_rows / tasks))
        end: dict[str, Any] = {}
        for index in range(tasks):
            begin = json.loads(start.get(str(index), "null"))
            host = self._host(index)
            self._ack(host, begin)
            if not host.sought or host.position != begin:
                host.seek(begin)
            emitted = 0
            while emitted < bound:
                step = host.step()
                if not step:
                    break
                emitted += len(step)
            end[str(index)] = json.dumps(host.position)
        return end

    def _ack(self, host: SpoutHost, offset: Any) -> None:
        try:
            host.ack_through(offset)
        except Exception as exc:
            msg = (
                f"spout {self._ref.component!r} task {host.index} raised in ack() "
                f"for its tuples up to offset {offset!r}: {type(exc).__name__}: "
                f"{exc}; fix ack()"
            )
            raise ComponentError(msg) from exc

    def partitions(  # noqa: D102 (documented by Spark)
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[InputPartition]:
        return [
            SpoutPartition(int(index), start.get(index, "null"), stop)
            for index, stop in sorted(end.items(), key=lambda kv: int(kv[0]))
            if start.get(index, "null") != stop
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Replay one task's offset range as emit rows, then one offset row.

        Raises:
            ReplayError: the spout stopped emitting, or went past the end offset,
                before it emitted the end offset: it is not deterministic.
        """
        if not isinstance(partition, SpoutPartition):
            msg = f"sr3_spout cannot read a {type(partition).__name__} partition"
            raise TypeError(msg)
        ref = self._ref
        conf = json.dumps(dict(ref.conf), sort_keys=True, default=str)
        kept = (
            ref.topology_path,
            ref.environment,
            ref.parallelism,
            ref.component,
            conf,
            partition.index,
        )
        # taken out while reading: a read that fails leaves no half-read spout
        host = _read_hosts.pop(kept, None)
        if host is None:
            topology = topology_of(ref)
            host = SpoutHost(topology, ref.component, partition.index, ref.conf)
        start, end = json.loads(partition.start), json.loads(partition.end)
        host.seek(start)
        rows: list[tuple[Any, ...]] = []
        while host.position != end:
            step = host.step()
            if not step or _past(host.position, end):
                _index, batch = spark_task()
                msg = (
                    f"spout {ref.component!r} task {partition.index} did not replay "
                    f"offsets {start!r}..{end!r} in batch {batch} (stopped at "
                    f"{host.position!r}); seek() and next_tuple() must reproduce "
                    "the same emits"
                )
                raise ReplayError(msg)
            for emit in step:
                seq = f"{len(rows):09d}.{partition.index:04d}"
                try:
                    values = encode_value(emit.values)
                except CodecError as exc:
                    msg = (
                        f"spout {ref.component!r} task {partition.index} emitted "
                        f"{emit.values!r} at offset {emit.offset!r}, which Spark "
                        f"cannot carry ({exc}); tuples travel as msgpack: emit "
                        "str, int, float, bool, None, lists and dicts, as "
                        "Storm's JSON multilang carries them"
                    )
                    raise ComponentError(msg) from exc
                task = host.task_key
                rows.append(
                    (ref.component, emit.stream, EMIT, values, task, emit.route, seq)
                )
        offset = encode_value(end)
        # the offset row's state is the partition's tuple count (the report's)
        count = encode_value(len(rows))
        rows.append(
            (ref.component, str(partition.index), OFFSET, offset, None, count, "")
        )
        while len(_read_hosts) >= _KEPT_HOSTS:
            del _read_hosts[next(iter(_read_hosts))]
        _read_hosts[kept] = host
        return iter(rows)


def _past(position: Any, end: Any) -> bool:
    try:
        return bool(position > end)
    except TypeError:
        return False


class SpoutSource(DataSource):
    """Data source ``sr3_spout``.

    Options: ``topology``, ``component``, ``conf`` (a :class:`ComponentRef`),
    ``maxRowsPerBatch`` and ``startOffsets``.
    """

    @classmethod
    def name(cls) -> str:
        """Return the format name."""
        return SOURCE_NAME

    def schema(self) -> str:
        """Return the bridge's row schema."""
        return ROW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's
        """Return the reader of the spout the options name."""
        del schema
        options = self.options
        max_rows = int(options.get(MAX_ROWS_OPTION) or _DEFAULT_MAX_ROWS)
        start = json.loads(options.get(START_OFFSETS_OPTION) or "{}")
        return SpoutStreamReader(ComponentRef.from_options(options), max_rows, start)
