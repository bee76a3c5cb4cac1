"""The tree's generation through real Storm, in a hidden trailing tuple field.

In native checkpoint mode every tree carries the rollback generation it was
emitted in, so a stateful bolt can drop a straggler of a rolled-back tree
however late it comes (:meth:`~storm_bridge.native_agents.BoltAgent.stale`).
Our local cluster carries it in the multilang key
:data:`~storm_bridge.messages.GENERATION_KEY`; Storm's ShellSpout and ShellBolt
drop keys they do not know. On real Storm it travels as the value of one extra
output field, :data:`~storm_bridge.messages.HIDDEN_GENERATION_FIELD`, declared
at submit after the user's fields on every stream of every Python component
(:func:`carries_generation`; Storm's ``TupleImpl`` checks a tuple's value count
against its declared fields).

Every Python component then runs through :func:`main` instead of
``streamparse_run`` (``sr3 run`` launches it with ``python -c``, ``sparse
submit`` with the console script :data:`LAUNCHER`, :func:`cli`): the same
class, its serializer wrapped in :class:`GenerationFieldSerializer`, which
translates at the wire, so the components (ours and plain streamparse ones)
never see the field:

* the handshake's context lists its sources' fields without the hidden one
  (pystorm makes namedtuples of them; the field trails, so the index of a
  fields grouping's field is unchanged);
* a tuple in from a stream whose declared fields end with the hidden field
  loses its last value; the value becomes the message's ``GENERATION_KEY``
  (what :class:`~storm_bridge.stateful.StatefulBolt` reads, as on the local
  cluster) and is remembered for the tuple's id until it is acked or failed;
* an emit gets the generation appended: a spout's is its ``GENERATION_KEY``
  (:class:`~storm_bridge.replayable.ReplayableSpout` sets it; a plain spout's
  emit carries null), a bolt's is the newest generation among its anchors'
  (as the local cluster passes it on), null when unanchored or unknown.

The same value carries the tuple's lineage (:mod:`storm_bridge.lineage`), by
which a stateful task under ``sr3.recovery.scope=task`` tells a replayed tuple
it already processed: the value is then the text ``"<generation>:<lineage>"``
(text, which every Storm serializer passes between workers), else the
generation alone. A spout's lineage is its emit's
:data:`~storm_bridge.messages.LINEAGE_KEY`; a bolt's is derived from its
anchors' and the emit's position among those anchored on the same first input,
unless the emit names one (a stateful task emitting again what it emitted
before). The lineage an emit got is written back into the caller's message
under that key, so the stateful task can keep it.

Java components' streams carry no such field; a Java bolt subscribed to a
Python stream receives the extra trailing value (by name, ``_sr3_g``).

The wrapper also carries the rollback warm-up
(:data:`~topology_api.barriers.WARMUP_STREAM`). Storm's Netty client notices
that the worker at the other end of a connection died only when it next sends
on it, and drops that send and every one until it reconnected (STORM-1609's
"Re-connection ... was successful but N messages has been lost"). After a
worker kill the spouts hold still until the rollback ends, so the first tuples
they emit after it went over such a connection and were lost, and the next
PAUSE waited for their trees to time out. At a ROLLBACK each replayable spout
emits one warm-up tuple (its generation) to every Python bolt task; a bolt's
wrapper acks each warm-up it receives, never hands it to the component, and
relays the first of each newer generation to every Python bolt task once. So
every worker hosting a Python component sends over its connection to every
worker hosting a Python bolt while the owners restore, and the lost sends are
warm-ups. The context a component sees lists no warm-up stream.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sr3.config_table import read_setting
from storm_bridge.lineage import derive
from storm_bridge.messages import (
    GENERATION_FIELD_KEY,
    GENERATION_KEY,
    HIDDEN_GENERATION_FIELD,
    LINEAGE_KEY,
)
from storm_bridge.native_scope import SCOPE_KEY, TASK
from topology_api.barriers import WARMUP_STREAM, internal_stream

__all__ = [
    "LAUNCHER",
    "PENDING_MAX",
    "GenerationFieldSerializer",
    "carries_generation",
    "cli",
    "field_on",
    "launch_script",
    "launch_target",
    "lineages_on",
    "main",
    "warmup_emit",
]

_LAUNCH = f"-cfrom {__name__} import main; main"
#: The console script that runs :func:`cli` (setup.cfg's ``console_scripts``):
#: no ``streamparse_run`` in its name, so ``sparse submit`` leaves it be.
LAUNCHER: Final = "sr3_component_run"
#: Input tuples whose generation is remembered at most: a bolt that never acks
#: nor fails (Storm times its trees out) must not grow the map without end. An
#: emit anchored on a forgotten tuple carries null (the quiet-time fence).
PENDING_MAX = 65536
#: Where Storm >= 1.0.3 unpacks a topology jar's modules (as streamparse_run).
_RESOURCES = "resources"


def carries_generation(stream: str) -> bool:
    """Whether a Python component's output ``stream`` gets the hidden field.

    Every stream but Storm's own (``__...``) and the checkpoint barrier stream
    (native mode sends no barriers).
    """
    return not internal_stream(stream)


def warmup_emit(generation: int) -> dict[str, Any]:
    """The multilang emit of a rollback warm-up of ``generation`` (unanchored).

    Storm sends no task ids back (``need_task_ids`` false): the wrapper of a
    bolt writes it between the component's own messages.
    """
    return {
        "command": "emit",
        "stream": WARMUP_STREAM,
        "tuple": [generation],
        "anchors": [],
        "need_task_ids": False,
    }


def field_on(conf: Mapping[str, Any]) -> bool:
    """Whether a Storm conf's tuples carry the hidden field (their generation)."""
    return conf.get(GENERATION_FIELD_KEY) is True


def lineages_on(conf: Mapping[str, Any]) -> bool:
    """Whether a Storm conf's tuples carry lineages (the field, scope ``task``)."""
    return field_on(conf) and read_setting(conf, SCOPE_KEY) == TASK


def _generation(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _tag(value: object) -> tuple[int | None, int | None]:
    """Return (generation, lineage) of a hidden field's value."""
    if isinstance(value, str):
        generation, _, lineage = value.partition(":")
        try:
            return (int(generation) if generation else None), int(lineage)
        except ValueError:
            return None, None
    return _generation(value), None


def _value(generation: int | None, lineage: int | None) -> Any:
    """The hidden field's value of a (generation, lineage)."""
    if lineage is None:
        return generation
    return f"{'' if generation is None else generation}:{lineage}"


class GenerationFieldSerializer:
    """A pystorm serializer that appends and strips the hidden generation field.

    Off (passing every message through) until a handshake whose conf sets
    :data:`~storm_bridge.messages.GENERATION_FIELD_KEY`.

    Args:
        inner: The component's pystorm serializer (JSON or msgpack).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.on = False
        #: Whether emits get lineages (``sr3.recovery.scope=task``).
        self.lineages = False
        #: The (source component, stream) this task reads that carry the field.
        self._tagged: set[tuple[str, str]] = set()
        #: (generation, lineage) of each input tuple not yet acked or failed,
        #: by tuple id.
        self._pending: dict[str, tuple[int | None, int | None]] = {}
        #: Emits anchored on each pending input so far (its first anchor).
        self._emits: dict[str, int] = {}
        #: Newest warm-up generation relayed (-1: none yet).
        self._warmed = -1
        self._lock = threading.Lock()

    @property
    def input_stream(self) -> Any:
        """The inner serializer's input stream (pystorm reads it)."""
        return self.inner.input_stream

    @property
    def output_stream(self) -> Any:
        """The inner serializer's output stream (pystorm compares it to stdout)."""
        return self.inner.output_stream

    def read_message(self) -> Any:
        """Read a message from Storm; strip a tuple's hidden field.

        A warm-up tuple is acked (and relayed, once per newer generation) here
        and the next message read instead: the component never sees one.
        """
        while True:
            message = self.inner.read_message()
            if isinstance(message, dict):
                if "conf" in message and "context" in message:
                    self._handshake(message["conf"], message["context"])
                elif self.on and "tuple" in message:
                    if message.get("stream") == WARMUP_STREAM:
                        self._warm(message)
                        continue
                    self._strip(message)
            return message

    def _warm(self, message: Mapping[str, Any]) -> None:
        """Ack a warm-up tuple; relay it if its generation is newer than any yet."""
        self.inner.send_message({"command": "ack", "id": message.get("id")})
        values = message.get("tuple")
        generation = (
            _generation(values[0]) if isinstance(values, list) and values else None
        )
        if generation is None or generation <= self._warmed:
            return
        self._warmed = generation
        self.inner.send_message(warmup_emit(generation))

    def send_message(self, message: Any) -> None:
        """Send a message to Storm; append the hidden field to an emit."""
        if self.on and isinstance(message, dict):
            command = message.get("command")
            if command == "emit":
                message = self._append(message)
            elif command in ("ack", "fail"):
                with self._lock:
                    self._pending.pop(str(message.get("id")), None)
                    self._emits.pop(str(message.get("id")), None)
        self.inner.send_message(message)

    def serialize_dict(self, message: Mapping[str, Any]) -> Any:
        """The inner serializer's encoding (some callers use it directly)."""
        return self.inner.serialize_dict(message)

    def _handshake(self, conf: Mapping[str, Any], context: dict[str, Any]) -> None:
        self.on = field_on(conf)
        if not self.on:
            return
        # lineages serve task scope only: under global scope nothing reads them
        self.lineages = lineages_on(conf)
        sources = context.get("source->stream->fields") or {}
        for source in list(sources):
            streams = sources[source] or {}
            streams.pop(WARMUP_STREAM, None)
            if not streams:
                # a source this task reads only for the warm-up
                del sources[source]
                continue
            for stream, names in streams.items():
                if names and names[-1] == HIDDEN_GENERATION_FIELD:
                    # the component sees its sources' fields as declared by
                    # the user (pystorm makes namedtuples of them)
                    streams[stream] = names[:-1]
                    self._tagged.add((str(source), str(stream)))

    def _strip(self, message: dict[str, Any]) -> None:
        key = (str(message.get("comp")), str(message.get("stream")))
        values = message.get("tuple")
        if key not in self._tagged or not isinstance(values, list) or not values:
            return
        generation, lineage = _tag(values.pop())
        if generation is not None:
            message[GENERATION_KEY] = generation
        if lineage is not None:
            message[LINEAGE_KEY] = lineage
        with self._lock:
            self._pending[str(message.get("id"))] = (generation, lineage)
            if len(self._pending) > PENDING_MAX:  # the oldest first (insertion order)
                oldest = next(iter(self._pending))
                del self._pending[oldest]
                self._emits.pop(oldest, None)

    def _append(self, message: dict[str, Any]) -> dict[str, Any]:
        out = dict(message)
        spout_generation = out.pop(GENERATION_KEY, None)
        named = out.pop(LINEAGE_KEY, None)
        stream = out.get("stream") or "default"
        if not carries_generation(str(stream)):
            return out
        anchors = [str(a) for a in out.get("anchors") or []]
        lineage = named if isinstance(named, int) else None
        if anchors:
            with self._lock:
                known = [self._pending.get(a, (None, None)) for a in anchors]
                tagged = [g for g, _ in known if g is not None]
                generation = max(tagged) if tagged else None
                parents = [lin for _, lin in known if lin is not None]
                if self.lineages and lineage is None and len(parents) == len(anchors):
                    n = self._emits.get(anchors[0], 0)
                    self._emits[anchors[0]] = n + 1
                    lineage = derive(parents, n)
        else:
            generation = _generation(spout_generation)
        # the caller keeps the lineage its emit got (a stateful task's buffer)
        message[LINEAGE_KEY] = lineage
        out["tuple"] = [*out.get("tuple", []), _value(generation, lineage)]
        return out


def launch_script(serializer: str, target: str) -> str:
    """Return the one argument Storm passes to the virtualenv's ``python``.

    Storm runs a ShellComponent as ``[execution_command, script]``; ``-c``
    takes the rest of its argument as the program.
    """
    return f"{_LAUNCH}({serializer!r}, {target!r})"


def launch_target(script: str) -> str | None:
    """Return the ``module.Class`` a :func:`launch_script` runs (None: not one)."""
    if not script.startswith(_LAUNCH):
        return None
    try:
        _serializer, target = ast.literal_eval(script.removeprefix(_LAUNCH))
    except (ValueError, SyntaxError, TypeError):
        return None
    return str(target)


def main(serializer: str, target: str) -> None:
    """Run the component class ``target`` (``module.Class``) as streamparse_run does.

    Its serializer is wrapped in :class:`GenerationFieldSerializer`.
    """
    module_name, class_name = target.rsplit(".", 1)
    import_path = os.getcwd()
    module_file = os.path.join(
        import_path, _RESOURCES, module_name.replace(".", os.path.sep) + ".py"
    )
    if os.path.isfile(module_file):
        import_path = os.path.join(import_path, _RESOURCES)
    sys.path.append(import_path)
    component_class = getattr(importlib.import_module(module_name), class_name)
    component = component_class(serializer=serializer)
    component.serializer = GenerationFieldSerializer(component.serializer)
    component.run()


def cli(argv: Sequence[str] | None = None) -> None:
    """Run :func:`main` from ``streamparse_run``'s arguments (:data:`LAUNCHER`).

    ``[-s SERIALIZER] module.Class``: ``sparse submit`` prepends ``-s`` to a
    component's script and Storm passes the script as one argument, split here
    as ``streamparse_run`` splits it.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 1:
        args = args[0].split()
    parser = argparse.ArgumentParser(
        prog=LAUNCHER,
        description="Run a streamparse spout or bolt class as streamparse_run "
        "does, carrying sr3's generation in a hidden trailing tuple field.",
    )
    parser.add_argument("target_class", help="the component, as module.Class")
    parser.add_argument(
        "-s", "--serializer", default="json", help="pystorm serializer (json)"
    )
    parsed = parser.parse_args(args)
    main(parsed.serializer, parsed.target_class)
