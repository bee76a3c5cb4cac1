"""The messages of Storm's multilang protocol, from Storm's side.

Storm writes the handshake (``conf``, ``pidDir``, ``context``), tuples and
heartbeats to bolts, and commands to spouts; builders for each are here. What a
subprocess writes is parsed into :class:`ShellMsg` with the defaults of Storm's
``JsonSerializer.readShellMsg``: ``stream`` defaults to ``default``, ``task`` to
0 (not a direct emit) and ``need_task_ids`` to true.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from storm_bridge.errors import E_STDOUT, MultilangProtocolError

__all__ = [
    "DEFAULT_STREAM",
    "GENERATION_FIELD_KEY",
    "GENERATION_KEY",
    "LINEAGE_KEY",
    "HIDDEN_GENERATION_FIELD",
    "HEARTBEAT_STREAM",
    "LOG_LEVELS",
    "SYSTEM_COMPONENT",
    "SYSTEM_TASK_ID",
    "TICK_STREAM",
    "ShellMsg",
    "bolt_tuple_msg",
    "handshake_msg",
    "heartbeat_msg",
    "parse_pid_reply",
    "parse_shell_msg",
    "spout_command_msg",
]

DEFAULT_STREAM: Final = "default"
#: Extra key of a spout's emit and a bolt's input tuple: the native-mode
#: rollback generation of the tree (:mod:`storm_bridge.native`). The local
#: cluster carries it from a spout's emit to every tuple anchored on it.
#: Storm's own ShellSpout and ShellBolt drop keys they do not know: there the
#: generation travels in :data:`HIDDEN_GENERATION_FIELD` instead, which
#: :mod:`storm_bridge.generation_field` turns back into this key.
GENERATION_KEY: Final = "sr3_generation"
#: Multilang key of a tuple's lineage (:mod:`storm_bridge.lineage`): set on a
#: tuple in by :mod:`storm_bridge.generation_field`, on an emit by a replayable
#: spout (its root) or by a stateful task emitting again what it emitted before.
LINEAGE_KEY: Final = "sr3_lineage"
#: Trailing output field declared (at submit to real Storm, native mode) on
#: every stream of every Python component: the tree's generation, or null.
HIDDEN_GENERATION_FIELD: Final = "_sr3_g"
#: Storm conf key set at submit (never by hand) when the Python components'
#: streams carry :data:`HIDDEN_GENERATION_FIELD`.
GENERATION_FIELD_KEY: Final = "sr3.storm.generation.field"
HEARTBEAT_STREAM: Final = "__heartbeat"
SYSTEM_COMPONENT: Final = "__system"
TICK_STREAM: Final = "__tick"
SYSTEM_TASK_ID: Final = -1
#: Storm's multilang log levels (STORM-414), as sent in ``log`` commands.
LOG_LEVELS: Final = {0: "TRACE", 1: "DEBUG", 2: "INFO", 3: "WARN", 4: "ERROR"}

_SNIPPET_CHARS: Final = 200


def _snippet(text: str) -> str:
    return repr(text[:_SNIPPET_CHARS]) + ("..." if len(text) > _SNIPPET_CHARS else "")


@dataclass(frozen=True)
class ShellMsg:
    """One command from a subprocess, with Storm's defaults filled in.

    Attributes:
        command: ``emit``, ``ack``, ``fail``, ``log``, ``error``, ``metrics``,
            ``sync``...
        msg_id: The ``id`` field: tuple id of a bolt ack/fail, message id of a
            spout emit (None = unreliable).
        msg: Text of ``log`` and ``error``.
        stream: Stream of an emit (``default`` when absent).
        task: Target task of a direct emit; 0 means a regular emit.
        need_task_ids: Whether the emitter waits for the list of target tasks.
        values: The ``tuple`` field: values of an emit.
        anchors: Tuple ids an emit is anchored to.
        metric_name: Name of a ``metrics`` command.
        metric_params: Parameters of a ``metrics`` command.
        level: Level of a ``log`` command (0 TRACE ... 4 ERROR), 2 when absent.
        generation: The :data:`GENERATION_KEY` of a spout's emit (None: none).
    """

    command: str
    msg_id: Any = None
    msg: str | None = None
    stream: str = DEFAULT_STREAM
    task: int = 0
    need_task_ids: bool = True
    values: Sequence[Any] = ()
    anchors: tuple[str, ...] = ()
    metric_name: str | None = None
    metric_params: Any = None
    level: int = 2
    generation: int | None = None


def parse_shell_msg(raw: object, *, component: str, task_id: int) -> ShellMsg:
    """Check a decoded message from a subprocess and fill in Storm's defaults.

    Raises:
        MultilangProtocolError: the message is not a map with a string
            ``command``, or a field has a type Storm would reject.
    """

    def fail(detail: str) -> MultilangProtocolError:
        return MultilangProtocolError(component, task_id, detail)

    if not isinstance(raw, dict):
        kind = type(raw).__name__
        msg = (
            f"sent {kind} {_snippet(repr(raw))} where a command map belongs; {E_STDOUT}"
        )
        raise fail(msg)
    command = raw.get("command")
    if not isinstance(command, str):
        msg = f"sent a message without a command: {_snippet(repr(raw))}"
        raise fail(msg)
    stream = raw.get("stream")
    if stream is None:
        stream = DEFAULT_STREAM
    task = raw.get("task")
    if task is None:
        task = 0
    need = raw.get("need_task_ids")
    values = raw.get("tuple")
    anchors_raw = raw.get("anchors")
    anchors: list[str] = []
    if isinstance(anchors_raw, str):
        anchors = [anchors_raw]
    elif isinstance(anchors_raw, list):
        anchors = anchors_raw
    elif anchors_raw is not None:
        msg = f"sent anchors that are not a list of ids: {anchors_raw!r}"
        raise fail(msg)
    level = raw.get("level")
    generation = raw.get(GENERATION_KEY)
    problem = None
    if not isinstance(stream, str):
        problem = f"stream {stream!r} is not a string"
    elif not isinstance(task, int) or isinstance(task, bool):
        problem = f"task {task!r} is not an int"
    elif need is not None and not isinstance(need, bool):
        problem = f"need_task_ids {need!r} is not a bool"
    elif values is not None and not isinstance(values, list):
        problem = f"tuple {_snippet(repr(values))} is not a list"
    elif not all(isinstance(a, str) for a in anchors):
        problem = f"anchors {anchors!r} are not strings"
    elif generation is not None and (
        not isinstance(generation, int) or isinstance(generation, bool)
    ):
        problem = f"{GENERATION_KEY} {generation!r} is not an int"
    if problem is not None:
        msg = f"{command} command: {problem}"
        raise fail(msg)
    name = raw.get("name")
    return ShellMsg(
        command=command,
        msg_id=raw.get("id"),
        msg=None if raw.get("msg") is None else str(raw.get("msg")),
        stream=stream,
        task=task,
        need_task_ids=need is not False,
        values=values if values is not None else [],
        anchors=tuple(anchors),
        metric_name=name if isinstance(name, str) else None,
        metric_params=raw.get("params"),
        level=int(level)
        if isinstance(level, int | float) and not isinstance(level, bool)
        else 2,
        generation=generation,
    )


def parse_pid_reply(raw: object, *, component: str, task_id: int) -> int:
    """Return the pid of a handshake reply ``{"pid": n}``.

    Raises:
        MultilangProtocolError: the reply is not a map with an integer ``pid``.
    """
    pid = raw.get("pid") if isinstance(raw, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool):
        got = _snippet(repr(raw))
        msg = f"answered the handshake with {got} instead of {{'pid': <int>}}"
        raise MultilangProtocolError(component, task_id, msg)
    return pid


def handshake_msg(
    conf: Mapping[str, Any], pid_dir: str, context: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the setup message Storm sends first: ``conf``, ``pidDir``, ``context``."""
    return {"pidDir": pid_dir, "conf": dict(conf), "context": dict(context)}


def bolt_tuple_msg(  # noqa: PLR0913 (BoltMsg's fields)
    tuple_id: str,
    component: str | None,
    stream: str,
    task: int,
    values: Sequence[Any],
    generation: int | None = None,
) -> dict[str, Any]:
    """Return a tuple for a bolt subprocess, as ShellBolt's ``BoltMsg`` is written.

    ``generation`` (native mode's rollback generation of the tuple's tree) goes
    in :data:`GENERATION_KEY` when known.
    """
    message: dict[str, Any] = {
        "id": tuple_id,
        "comp": component,
        "stream": stream,
        "task": task,
        "tuple": list(values),
    }
    if generation is not None:
        message[GENERATION_KEY] = generation
    return message


def heartbeat_msg(tuple_id: str) -> dict[str, Any]:
    """Return ShellBolt's heartbeat tuple (system task -1, no component, no values)."""
    return bolt_tuple_msg(tuple_id, None, HEARTBEAT_STREAM, SYSTEM_TASK_ID, [])


def spout_command_msg(command: str, msg_id: Any = "") -> dict[str, Any]:
    """Return a ShellSpout command (``next`` and friends carry ``id: ""``)."""
    return {"command": command, "id": msg_id}
