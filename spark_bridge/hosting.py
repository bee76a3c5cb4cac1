"""Run streamparse spouts and bolts in-process, the way a multilang task runs them.

A hosted component is the user's class instantiated with discarded pipes: the
bridge synthesises the Storm ``conf`` and ``context`` of the handshake, takes
pystorm's set-up step and calls ``initialize`` as pystorm's ``run`` does, and
then drives it one step at a time (pystorm's private steps are reached through
:class:`topology_api.pystorm_steps.PystormSteps`). Emits are captured instead of
written to Storm; the other multilang messages (ack, fail, sync, metrics) are
dropped and ``log`` messages go to Python logging. User classes run unchanged.
Spouts are hosted by :class:`spark_bridge.spout_host.SpoutHost`, bolts by
:class:`BoltHost`.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, NamedTuple

from pystorm.bolt import BatchingBolt
from pystorm.component import Tuple as StormTuple

from spark_bridge.component_traits import emits_on_ticks, tick_freq_s
from spark_bridge.context import storm_conf, storm_context
from spark_bridge.errors import ComponentError, UnsupportedTopologyError
from spark_bridge.routes import EmitRouter
from spark_bridge.rows import storm_values
from sr3.codec import decode_value, encode_value
from sr3.key_state import KeyState
from topology_api.barriers import internal_stream
from topology_api.pystorm_steps import PystormSteps
from topology_api.topology import LoadedTopology

__all__ = [
    "BoltHost",
    "Host",
    "Emit",
    "Flushed",
]

logger = logging.getLogger(__name__)

DEFAULT_STREAM: Final = "default"
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
        route: The tasks shuffle groupings picked when the emitter asked for
            task ids (:mod:`spark_bridge.routes`), else None.
    """

    stream: str
    values: list[Any]
    offset: Any = None
    route: bytes | None = None


class _Discard(io.StringIO):
    """A pipe that forgets what is written (pystorm's serializer needs one)."""

    def write(self, s: str) -> int:
        return len(s)


class Host:
    """Shared set-up of a hosted spout or bolt (``SpoutHost``, :class:`BoltHost`)."""

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
        #: the task's Storm task id, and as emit rows carry it (their ``key``)
        self.task_id = int(context["taskid"])
        self.task_key = encode_value(self.task_id)
        instance: Any = info.component_cls(
            input_stream=_Discard(), output_stream=_Discard(), rdb_signal=None
        )
        instance.send_message = self._message
        self.instance = instance
        #: the steps of pystorm's run loop this host takes
        self.steps = PystormSteps(instance)
        root = logging.getLogger()
        before = list(root.handlers)
        try:
            self.steps.setup(conf, context)
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
        #: ``topology.tick.tuple.freq.secs`` (None: Storm sends no tick tuples)
        self.tick_freq_s = tick_freq_s(conf)
        self._topology = topology
        self._overrides = overrides
        self._router: EmitRouter | None = None
        #: stream -> field count of every declared output stream
        self._widths = {name: len(out.fields) for name, out in info.outputs.items()}
        self._sanity = bool(conf.get(SANITY_CHECK_KEY))

    @property
    def router(self) -> EmitRouter:
        """The task's :class:`EmitRouter`, built on the first emit that needs it."""
        if self._router is None:
            self._router = EmitRouter(
                self._topology, self.component, self.index, self._overrides
            )
        return self._router

    def _captured(
        self, stream: str, tup: Any, offset: Any, *, need_task_ids: bool
    ) -> list[int] | None:
        """Capture an emit; return Storm's task ids when asked for (else None).

        Raises:
            UnicodeDecodeError: a bytes value is not UTF-8 (see
                :func:`spark_bridge.rows.storm_values`).
            ComponentError: a grouping cannot route the tuple.
        """
        values = storm_values(tup)
        if not need_task_ids:
            self.emits.append(Emit(stream, values, offset))
            return None
        ids, route = self.router.targets(stream, values)
        self.emits.append(Emit(stream, values, offset, route))
        return ids

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
            declared = sorted(s for s in self._widths if not internal_stream(s))
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


class BoltHost(Host):
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
        #: emit rows' ``key`` -> the emitting task id it encodes
        self._senders: dict[bytes, int] = {}

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
        # pystorm's BatchingBolt.emit never asks Storm for task ids
        need = need_task_ids and not isinstance(self.instance, BatchingBolt)
        try:
            return self._captured(stream_id, tup, None, need_task_ids=need)
        except UnicodeDecodeError as exc:
            # pystorm logs the serializer's failure and goes on without the emit
            self._log.error(
                "component %s task %s: failed to send emit %r on stream %s (%s); "
                "dropped, as on Storm: emit str, not bytes that are not UTF-8",
                self.component,
                self.index,
                tup,
                stream_id,
                exc,
            )
            return [] if need else None

    def _read_tuple(self) -> StormTuple:
        pending, self._pending = self._pending, None
        if pending is None:
            msg = f"bolt {self.component!r} read a tuple outside process()"
            raise ComponentError(msg)
        return pending

    def make_tuple(
        self, source: str, stream: str, values: list[Any], task: bytes | None = None
    ) -> StormTuple:
        """Return the Storm tuple the bolt receives for ``values``.

        ``task`` is the emit row's ``key``: the emitting task's Storm id, which
        Storm hands on as the tuple's ``task`` (0 when unknown).
        """
        self._seq += 1
        try:
            val_type = self._types[(source, stream)]
        except KeyError:
            types = self.steps.source_tuple_types()
            val_type = self._types[(source, stream)] = types[source].get(stream)
        payload = tuple(values) if val_type is None else val_type(*values)
        sender = 0
        if task is not None:
            sender = self._senders.get(task, -1)
            if sender < 0:
                decoded = decode_value(task)
                sender = decoded if isinstance(decoded, int) else 0
                self._senders[task] = sender
        return StormTuple(str(self._seq), source, stream, sender, payload)

    @property
    def ticked(self) -> bool:
        """Whether Storm would tick this bolt to some effect (see :func:`ticks`)."""
        return self.tick_freq_s is not None and emits_on_ticks(type(self.instance))

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
            freq = self.tick_freq_s or 1.0
            rate = int(freq) if freq.is_integer() else freq  # as Storm sends it
            tick = StormTuple(None, "__system", "__tick", -1, (rate,))
            yield self._flush_call([], functools.partial(instance.process_tick, tick))
            return
        for key, tups in self.steps.take_batches().items():
            with self.steps.batch_anchored(key, tups):
                yield self._flush_call(
                    list(tups), functools.partial(instance.process_batch, key, tups)
                )

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
        self.steps.run_step()
        emitted, self.emits = self.emits, []
        return emitted

    def process_keyed(self, tup: StormTuple, scoped: KeyState) -> list[Emit]:
        """Run a stateful bolt's ``process`` on ``tup``, ``self.state`` = ``scoped``.

        The Spark form of one step of the bolt's run loop for a data tuple, with
        the key's state already looked up once for all of the key's tuples (a
        Spark task never sees barriers, heartbeats or ticks; acks go nowhere).
        """
        self.emits = []
        self.instance.process_scoped(tup, scoped)
        emitted, self.emits = self.emits, []
        return emitted
