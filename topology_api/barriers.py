"""Checkpoint barriers shared by the stateful components and the local cluster.

Barriers travel on the stream :data:`BARRIER_STREAM`, which stateful bolts and
replayable spouts declare in their spec, so Storm's context and Thrift
definition stay valid. Stateful tasks report restores and durable snapshots as
``metrics`` commands named :data:`RESTORED_METRIC` and :data:`SNAPSHOT_METRIC`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from streamparse import Stream

__all__ = [
    "BARRIER_COMMAND",
    "BARRIER_FIELDS",
    "BARRIER_STREAM",
    "END_OF_INPUT_METRIC",
    "KEY_GROUPS_METRIC",
    "KEY_GROUP_STREAM",
    "KEY_GROUP_TABLE_KEY",
    "LOADED_METRIC",
    "LOCAL_CLUSTER_KEY",
    "RESTORED_METRIC",
    "SNAPSHOT_METRIC",
    "WAITING_METRIC",
    "WARMUP_FIELDS",
    "WARMUP_STREAM",
    "internal_stream",
    "task_index",
    "with_barrier",
]

#: Stream carrying checkpoint barriers (ALL towards downstream tasks). One leading
#: underscore only: Storm reserves ids starting with ``__`` for its own streams and
#: Nimbus rejects a topology declaring one (InvalidTopologyException).
BARRIER_STREAM: Final = "_sr3_barrier"
#: Fields of a barrier tuple: the epoch and what the sender reports.
BARRIER_FIELDS: Final = ("epoch", "info")
#: Stream of the rollback warm-up on real Storm (native mode with the hidden
#: generation field): every Python component declares it and every Python bolt
#: subscribes to it from each of them with ALL grouping, so a rollback sends a
#: tuple over every connection between workers before the spouts resume
#: (:mod:`storm_bridge.generation_field`). Never seen by a component.
WARMUP_STREAM: Final = "_sr3_warmup"
#: Fields of a warm-up tuple: the rollback generation.
WARMUP_FIELDS: Final = ("generation",)
#: Spout command asking a replayable spout to emit a barrier (``id`` = epoch).
BARRIER_COMMAND: Final = "sr3_barrier"
#: ``metrics`` name a stateful task sends once its state is restored.
RESTORED_METRIC: Final = "sr3.restored"
#: ``metrics`` name a restored stateful task sends as its restore progresses:
#: when it processed its first tuple and when its whole state had arrived
#: (``first_tuple_s``, ``state_loaded_s``, seconds after it was ready).
LOADED_METRIC: Final = "sr3.loaded"
#: ``metrics`` name a stateful task sends once its snapshot of an epoch is durable.
SNAPSHOT_METRIC: Final = "sr3.snapshot"
#: Stream of the local cluster's key-group hand-over commands to a stateful
#: task (``sr3.rebalance.routing = key-groups``): values ``[action, info]``,
#: ``install`` (take key groups from another task's snapshot) or ``drop``.
#: Like barriers, they are sent by the cluster, never declared or acked.
KEY_GROUP_STREAM: Final = "_sr3_keygroups"
#: Conf key the local cluster sets on each task of a key-group-routed component:
#: the key group -> task index table its restore places key groups by (JSON of
#: :func:`sr3.keygroups.encode_table`).
KEY_GROUP_TABLE_KEY: Final = "sr3.keygroups.table"
#: ``metrics`` name a stateful task sends once it carried out a hand-over command.
KEY_GROUPS_METRIC: Final = "sr3.keygroups"
#: ``metrics`` name a spout sends when it starts waiting for its source (params
#: ``{"reason": text}``: a broker down, say) and when it stops (``{"reason":
#: None}``). A waiting spout is not dry: ``sr3 run --until-idle`` does not end
#: the run on it, and says what it waits for.
WAITING_METRIC: Final = "sr3.waiting"
#: ``metrics`` name a spout sends when its input is at its end (params ``{"end":
#: True}``): ``sr3 run --until-idle`` then ends the run as soon as nothing is in
#: flight, without the quiet period of ``sr3.idle.quiet.s``. An emit after it
#: (a rollback replaying, say) takes it back.
END_OF_INPUT_METRIC: Final = "sr3.input.end"
#: Conf key the local cluster sets (True) on every task's conf: the ``sr3.*``
#: metrics only it reads may be sent. Real Storm's ShellSpout and ShellBolt die
#: on a metric no Java code registered ("Could not find metric by name").
LOCAL_CLUSTER_KEY: Final = "sr3.local.cluster"


def internal_stream(stream: object) -> bool:
    """Whether ``stream`` is Storm's (``__...``) or SR3's barrier or warm-up stream.

    Neither is a user's output: reports, counters and error messages leave
    them out. (The barrier stream's id has one leading underscore only, since
    Nimbus refuses topologies that declare ids starting with ``__``.)
    """
    name = str(stream)
    return name.startswith("__") or name in (BARRIER_STREAM, WARMUP_STREAM)


def with_barrier(outputs: Any) -> list[Any]:
    """Return a component's declared outputs with the barrier stream added."""
    declared = list(outputs or [])
    if not any(isinstance(o, Stream) and o.name == BARRIER_STREAM for o in declared):
        declared.append(Stream(fields=list(BARRIER_FIELDS), name=BARRIER_STREAM))
    return declared


def task_index(context: Mapping[str, Any]) -> tuple[int, int]:
    """Return (index of this task among its component's tasks, task count)."""
    component = context["componentid"]
    task_id = int(context["taskid"])
    tasks = sorted(
        int(t) for t, c in context["task->component"].items() if c == component
    )
    return tasks.index(task_id), len(tasks)
