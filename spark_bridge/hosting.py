"""Run streamparse spouts and bolts in-process, the way a multilang task runs them.

A hosted component is the user's class instantiated with discarded pipes: the
bridge synthesises the Storm ``conf`` and ``context`` of the handshake, calls
``_setup_component`` and ``initialize`` as pystorm's ``run`` does, and then
drives it one step at a time. Emits are captured instead of written to Storm;
the other multilang messages (ack, fail, sync, metrics) are dropped and ``log``
messages go to Python logging. User classes run unchanged.
"""

from __future__ import annotations

import functools
import io
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, NamedTuple

from pyspark import TaskContext
from pystorm.bolt import BatchingBolt
from pystorm.bolt import Bolt as StormBolt
from pystorm.component import Tuple as StormTuple

from spark_bridge.context import storm_conf, storm_context
from spark_bridge.errors import ComponentError, UnsupportedTopologyError
from spark_bridge.rows import storm_values
from sr3.state import KeyState
from storm_bridge.components import StatefulBolt
from storm_bridge.topology import LoadedTopology, load_topology

__all__ = [
    "BoltHost",
    "Emit",
    "Flushed",
    "SpoutHost",
    "loaded_topology",
    "spark_task",
    "storm_conf",
    "storm_context",
]

logger = logging.getLogger(__name__)

DEFAULT_STREAM: Final = "default"
#: Storm conf key of the tick tuple period (the value a tick tuple carries).
TICK_FREQ_KEY: Final = "topology.tick.tuple.freq.secs"
#: Storm conf key: check that emits have as many values as their stream's fields.
SANITY_CHECK_KEY: Final = "topology.testing.always.try.serialize"
_LOG_LEVELS: Final = {
    0: logging.DEBUG,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}


class Emit(NamedTuple):
    """One captured emit (a named tuple: one is made per emitted tuple).

    Attributes:
        stream: Stream id.
        values: The tuple's values.
        offset: The spout offset given with the emit (spouts only).
    """

    stream: str
    values: list[Any]
    offset: Any = None


def spark_task() -> tuple[int, str]:
    """Return (Spark partition id, micro-batch id) of the running Spark task."""
    context = TaskContext.get()
    if context is None:
        return 0, "?"
    batch = context.getLocalProperty("streaming.sql.batchId") or "?"
    return context.partitionId(), batch


@functools.cache
def loaded_topology(path: str) -> LoadedTopology:
    """Return the topology file at ``path``, loaded once per Python worker."""
    return load_topology(path)


class _Discard(io.StringIO):
    """A pipe that forgets what is written (pystorm's serializer needs one)."""

    def write(self, s: str) -> int:
        return len(s)


class _Host:
    """Shared set-up of a hosted spout or bolt."""

    def __init__(
        self,
        topology: LoadedTopology,
        component: str,
        index: int,
        overrides: Mapping[str, Any],
    ) -> None:
        self.component = component
        self.index = index
        self.emits: list[Emit] = []
        self._log = logging.getLogger(f"spark_bridge.component.{component}")
        info = topology.components[component]
        conf = storm_conf(topology, component, overrides)
        context = storm_context(topology, component, index, overrides)
        instance: Any = info.component_cls(
            input_stream=_Discard(), output_stream=_Discard(), rdb_signal=None
        )
        instance.send_message = self._message
        self.instance = instance
        root = logging.getLogger()
        before = list(root.handlers)
        try:
            instance._setup_component(conf, context)  # noqa: SLF001 (pystorm's run)
        finally:
            # pystorm adds a root handler writing logs to Storm; ours is logging.
            for handler in root.handlers[:]:
                if handler not in before:
                    root.removeHandler(handler)
        try:
            instance.initialize(conf, context)
        except Exception as exc:
            msg = (
                f"component {component!r} task {index} failed in initialize(): "
                f"{type(exc).__name__}: {exc}; fix initialize() or the conf it "
                "reads (the topology's or component's config=, or -o KEY=VALUE)"
            )
            raise ComponentError(msg) from exc
        self.tick_freq_s = conf.get(TICK_FREQ_KEY) or 1
        #: stream -> field count of every declared output stream
        self._widths = {name: len(out.fields) for name, out in info.outputs.items()}
        self._sanity = bool(conf.get(SANITY_CHECK_KEY))

    def _message(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        command = message.get("command")
        if command == "log":
            level = _LOG_LEVELS.get(int(message.get("level", 2)), logging.INFO)
            self._log.log(level, "%s", message.get("msg"))
        elif command == "error":
            self._log.error("%s", message.get("msg"))

    def _check_emit(self, stream: str, values: Any) -> None:
        """Refuse an emit that pystorm or Storm's executor refuses on Storm.

        Raises:
            TypeError: ``values`` is not a list or tuple (pystorm's check).
            ComponentError: ``stream`` is not declared, or, with Storm's
                ``topology.testing.always.try.serialize``, the tuple's width is
                not the stream's field count.
        """
        if not isinstance(values, list | tuple):
            msg = (
                "All Tuples must be either lists or tuples, received "
                f"{type(values)!r} instead."
            )
            raise TypeError(msg)
        width = self._widths.get(stream)
        if width is None:
            declared = sorted(s for s in self._widths if not s.startswith("__"))
            msg = (
                f"component {self.component!r} task {self.index}: emit of "
                f"{values!r} on stream {stream!r} failed: Unknown stream ID: "
                f"{stream!r} (declared: {declared}); declare the stream in the "
                "class's outputs (streamparse Stream(fields, name=...))"
            )
            raise ComponentError(msg)
        if self._sanity and width != len(values):
            msg = (
                f"component {self.component!r} task {self.index}: emit of "
                f"{values!r} on stream {stream!r} failed: Tuple created with wrong "
                f"number of fields. Expected {width} fields but got {len(values)} "
                f"fields ({SANITY_CHECK_KEY} is on)"
            )
            raise ComponentError(msg)

    def _direct(self, direct_task: Any) -> None:
        if direct_task is not None:
            msg = (
                f"component {self.component!r} emitted a direct tuple (task "
                f"{direct_task}); direct streams do not run on Spark yet: use a "
                "fields grouping"
            )
            raise UnsupportedTopologyError(msg)


class Flushed(NamedTuple):
    """One call of a tick flush (see :meth:`BoltHost.flush`).

    Attributes:
        held: The tuples of the processed batch (empty for a tick).
        emits: What the call emitted (nothing when it raised).
        error: What the call raised, if anything.
    """

    held: list[StormTuple]
    emits: list[Emit]
    error: Exception | None


class SpoutHost(_Host):
    """A replayable spout driven by ``seek`` and ``next_tuple``.

    Attributes:
        position: Offset of the last emit (after a seek: the sought offset).
    """

    def __init__(
        self,
        topology: LoadedTopology,
        component: str,
        index: int,
        overrides: Mapping[str, Any],
    ) -> None:
        super().__init__(topology, component, index, overrides)
        self.instance.emit = self._emit
        self.position: Any = None
        self.sought = False

    def _emit(
        self,
        tup: Any,
        offset: Any = None,
        tup_id: Any = None,
        stream: Any = None,
        direct_task: Any = None,
        need_task_ids: bool = False,
    ) -> Any:
        del tup_id
        self._direct(direct_task)
        if offset is None:
            msg = (
                f"spout {self.component!r} task {self.index} emitted {tup!r} without "
                "an offset; emit with self.emit(values, offset=n) so Spark can replay"
            )
            raise ComponentError(msg)
        stream_id = str(stream or DEFAULT_STREAM)
        self._check_emit(stream_id, tup)
        self.emits.append(Emit(stream_id, storm_values(tup), self._json(offset)))
        return [] if need_task_ids else None

    def _json(self, offset: Any) -> Any:
        """Return ``offset`` as Spark's JSON offset log gives it back.

        A tuple offset comes back as a list (and a dict's int keys as strings),
        so replays compare the offsets they reach in that form.

        Raises:
            ComponentError: the offset is not JSON-able.
        """
        if isinstance(offset, int | float | str):
            return offset
        try:
            return json.loads(json.dumps(offset))
        except (TypeError, ValueError) as exc:
            msg = (
                f"spout {self.component!r} task {self.index} emitted offset "
                f"{offset!r}, which Spark cannot keep in its JSON offset log "
                f"({exc}); use numbers, strings, lists or dicts of them"
            )
            raise ComponentError(msg) from exc

    def seek(self, offset: Any) -> None:
        """Seek the spout so its next emit follows ``offset`` (None: the start)."""
        self.instance.seek(offset)
        self.position = offset
        self.sought = True

    def step(self) -> list[Emit]:
        """Call ``next_tuple`` once; return its emits and advance :attr:`position`."""
        self.emits = []
        self.instance.next_tuple()
        emitted, self.emits = self.emits, []
        if emitted:
            self.position = emitted[-1].offset
        return emitted


class BoltHost(_Host):
    """A bolt fed one tuple at a time through pystorm's own ``_run`` step."""

    def __init__(
        self,
        topology: LoadedTopology,
        component: str,
        index: int,
        overrides: Mapping[str, Any],
    ) -> None:
        super().__init__(topology, component, index, overrides)
        self.instance.emit = self._emit
        self.instance.read_tuple = self._read_tuple
        self._pending: StormTuple | None = None
        self._seq = 0
        self._types: dict[tuple[str, str], Any] = {}

    def _emit(
        self,
        tup: Any,
        stream: Any = None,
        anchors: Any = None,
        direct_task: Any = None,
        need_task_ids: bool = False,
    ) -> Any:
        del anchors
        if direct_task is not None:
            self._direct(direct_task)
        stream_id = str(stream or DEFAULT_STREAM)
        self._check_emit(stream_id, tup)
        self.emits.append(Emit(stream_id, storm_values(tup)))
        return [] if need_task_ids else None

    def _read_tuple(self) -> StormTuple:
        pending, self._pending = self._pending, None
        if pending is None:
            msg = f"bolt {self.component!r} read a tuple outside process()"
            raise ComponentError(msg)
        return pending

    def make_tuple(self, source: str, stream: str, values: list[Any]) -> StormTuple:
        """Return the Storm tuple the bolt receives for ``values``."""
        self._seq += 1
        try:
            val_type = self._types[(source, stream)]
        except KeyError:
            types = self.instance._source_tuple_types  # noqa: SLF001 (pystorm's)
            val_type = self._types[(source, stream)] = types[source].get(stream)
        payload = tuple(values) if val_type is None else val_type(*values)
        return StormTuple(str(self._seq), source, stream, 0, payload)

    @property
    def ticked(self) -> bool:
        """Whether a stateless bolt emits on ticks (a BatchingBolt, process_tick)."""
        instance = self.instance
        if isinstance(instance, StatefulBolt):
            return False
        if isinstance(instance, BatchingBolt):
            return True
        return type(instance).process_tick is not StormBolt.process_tick

    def flush(self) -> Iterator[Flushed]:
        """Deliver the end-of-micro-batch tick, one :class:`Flushed` per call.

        The bolt instance does not outlive its Spark task, so whatever it holds
        back for a tick is emitted now: a ``BatchingBolt`` processes every batch
        (however many ticks ``ticks_between_batches`` asks for), one call per
        batch, as pystorm's ``process_batches`` does; another bolt gets one tick
        tuple. A call that raises yields its exception, and the next one runs.
        """
        instance = self.instance
        if not isinstance(instance, BatchingBolt):
            tick = StormTuple(None, "__system", "__tick", -1, (self.tick_freq_s,))
            yield self._flush_call([], functools.partial(instance.process_tick, tick))
            return
        batches = instance._batches  # noqa: SLF001 (pystorm's batches)
        instance._batches = defaultdict(list)  # noqa: SLF001 (pystorm's batches)
        for key, tups in batches.items():
            instance._current_tups = tups  # noqa: SLF001 (pystorm's anchoring)
            instance._current_key = key  # noqa: SLF001 (pystorm's anchoring)
            try:
                yield self._flush_call(
                    list(tups), functools.partial(instance.process_batch, key, tups)
                )
            finally:
                instance._current_tups = []  # noqa: SLF001 (pystorm's anchoring)
                instance._current_key = None  # noqa: SLF001 (pystorm's anchoring)

    def _flush_call(self, held: list[StormTuple], call: Callable[[], Any]) -> Flushed:
        self.emits = []
        try:
            call()
        except Exception as exc:  # handed to the stage's error policy
            self.emits = []
            return Flushed(held, [], exc)
        emitted, self.emits = self.emits, []
        return Flushed(held, emitted, None)

    def process(self, tup: StormTuple) -> list[Emit]:
        """Run the bolt on ``tup`` (state scoping and auto-ack included)."""
        self.emits = []
        self._pending = tup
        self.instance._run()  # noqa: SLF001 (one step of pystorm's run loop)
        emitted, self.emits = self.emits, []
        return emitted

    @property
    def keyed_by_grouping(self) -> bool:
        """Whether a stateful bolt keys its state by its fields grouping's values.

        True unless the class overrides ``state_key``; then the key Spark grouped
        by is the state key and need not be recomputed per tuple.
        """
        return type(self.instance).state_key is StatefulBolt.state_key

    def process_keyed(self, tup: StormTuple, scoped: KeyState) -> list[Emit]:
        """Run a stateful bolt's ``process`` on ``tup``, ``self.state`` = ``scoped``.

        The Spark form of one step of the bolt's run loop for a data tuple, with
        the key's state already looked up once for all of the key's tuples (a
        Spark task never sees barriers, heartbeats or ticks; acks go nowhere).
        """
        instance = self.instance
        self.emits = []
        instance._current_tups = [tup]  # noqa: SLF001 (pystorm's anchoring list)
        instance._sr3_current = scoped  # noqa: SLF001 (StatefulBolt's key scope)
        try:
            instance.process(tup)
        finally:
            instance._sr3_current = None  # noqa: SLF001
            instance._current_tups = []  # noqa: SLF001
        emitted, self.emits = self.emits, []
        return emitted
