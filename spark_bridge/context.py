"""The Storm conf and handshake context a hosted task receives, as Storm builds them.

A bolt or spout hosted on Spark must see in ``initialize(conf, context)`` what
the same task sees on the Storm engine (and on a Storm cluster):

- **conf**: Storm's defaults, the topology's ``config``, then the run's
  overrides (``sr3 run -o``, like ``sparse submit -o``: topology-wide), then
  the component's own ``config=``, which wins for every key except Storm's own
  (``topology.*`` and the like), of which Storm lets a component override only
  :data:`COMPONENT_OVERRIDABLE_KEYS`;
- **context**: task ids numbered as Storm's ``StormCommon.stormTaskInfo`` does,
  components (the acker ``__acker`` included) sorted by id in Java string order
  and numbered from 1, plus the streams, groupings and fields around the task.

The tables mirror ``storm_bridge.cluster.settings`` and
``storm_bridge.cluster.context``, which the Spark bridge may not import (they
are the Storm engine's runtime); a test checks that both agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from storm_bridge.topology import LoadedTopology

__all__ = [
    "ACKER_COMPONENT",
    "COMPONENT_OVERRIDABLE_KEYS",
    "STORM_DEFAULTS",
    "storm_conf",
    "storm_context",
    "task_ids",
]

ACKER_COMPONENT: Final = "__acker"
#: The subset of Storm's ``defaults.yaml`` the Storm engine passes on.
STORM_DEFAULTS: Final[Mapping[str, Any]] = {
    "storm.cluster.mode": "local",
    "supervisor.worker.timeout.secs": 30,
    "topology.workers": 1,
    "topology.acker.executors": None,
    "topology.debug": False,
    "topology.enable.message.timeouts": True,
    "topology.max.spout.pending": None,
    "topology.message.timeout.secs": 30,
    "topology.multilang.serializer": "org.apache.storm.multilang.JsonSerializer",
    "topology.shellbolt.max.pending": 100,
    "topology.tick.tuple.freq.secs": None,
    "topology.testing.always.try.serialize": False,
}
#: Storm keys a component's own conf may override (Storm drops the others).
COMPONENT_OVERRIDABLE_KEYS: Final = frozenset(
    {
        "topology.debug",
        "topology.max.spout.pending",
        "topology.max.task.parallelism",
        "topology.transactional.id",
        "topology.tick.tuple.freq.secs",
        "topology.sleep.spout.wait.strategy.time.ms",
        "topology.spout.wait.strategy",
        "topology.bolts.window.length.count",
        "topology.bolts.window.length.duration.ms",
        "topology.bolts.sliding.interval.count",
        "topology.bolts.sliding.interval.duration.ms",
        "topology.bolts.tuple.timestamp.max.lag.ms",
        "topology.bolts.message.id.field.name",
        "topology.state.provider",
        "topology.state.provider.config",
        "topology.bolts.late.tuple.stream",
    }
)
_STORM_KEY_PREFIXES: Final = (
    "topology.",
    "storm.",
    "supervisor.",
    "nimbus.",
    "worker.",
    "drpc.",
    "ui.",
    "logviewer.",
    "pacemaker.",
    "dev.zookeeper.",
    "java.library.path",
)
#: Conf keys the bridge removes: they would make storm_bridge open its own ring.
_STORM_RING_KEYS: Final = ("sr3.zk.hosts",)


def _topology_conf(
    topology: LoadedTopology, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    conf = dict(STORM_DEFAULTS)
    conf.update(topology.config)
    conf.update(overrides)
    conf["topology.name"] = topology.name
    return conf


def storm_conf(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the Storm conf a task of ``component`` receives (module docstring).

    The ``sr3.zk.hosts`` key is dropped so storm_bridge does not open a ring
    itself: on Spark the bridge writes the state.
    """
    conf = _topology_conf(topology, overrides)
    for key, value in topology.components[component].config.items():
        if key in COMPONENT_OVERRIDABLE_KEYS or not key.startswith(_STORM_KEY_PREFIXES):
            conf[key] = value
    for key in _STORM_RING_KEYS:
        conf.pop(key, None)
    return conf


def _java_order(component_id: str) -> bytes:
    return component_id.encode("utf-16-be")  # String.compareTo compares UTF-16 units


def _acker_tasks(conf: Mapping[str, Any]) -> int:
    acker = conf.get("topology.acker.executors")
    if acker is None:
        acker = conf.get("topology.workers") or 1
    try:
        return max(0, int(acker))
    except (TypeError, ValueError):
        return 1  # the Storm engine refuses such a conf before any task starts


def task_ids(topology: LoadedTopology, overrides: Mapping[str, Any]) -> dict[int, str]:
    """Return task id -> component id for every task, Storm's acker included."""
    counts = {name: comp.tasks for name, comp in topology.components.items()}
    ackers = _acker_tasks(_topology_conf(topology, overrides))
    if ackers > 0:
        counts[ACKER_COMPONENT] = ackers
    ids: dict[int, str] = {}
    next_id = 1
    for name in sorted(counts, key=_java_order):
        for _ in range(counts[name]):
            ids[next_id] = name
            next_id += 1
    return ids


def storm_context(
    topology: LoadedTopology,
    component: str,
    index: int,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the handshake ``context`` of task ``index`` of ``component``."""
    ids = task_ids(topology, overrides or {})
    own = [task for task, name in sorted(ids.items()) if name == component]
    comp = topology.components[component]
    targets: dict[str, dict[str, Any]] = {}
    for other in topology.components.values():
        for sub in other.inputs:
            if sub.source == component:
                targets.setdefault(sub.stream, {})[other.name] = (
                    sub.grouping.to_context()
                )
    sources: dict[str, dict[str, Any]] = {}
    source_fields: dict[str, dict[str, list[str]]] = {}
    for sub in comp.inputs:
        sources.setdefault(sub.source, {})[sub.stream] = sub.grouping.to_context()
        fields = topology.components[sub.source].outputs[sub.stream].fields
        source_fields.setdefault(sub.source, {})[sub.stream] = list(fields)
    return {
        "task->component": {str(t): c for t, c in ids.items()},
        "taskid": own[index % len(own)],
        "componentid": component,
        "streams": list(comp.outputs),
        "stream->outputfields": {s: list(o.fields) for s, o in comp.outputs.items()},
        "stream->target->grouping": targets,
        "source->stream->grouping": sources,
        "source->stream->fields": source_fields,
    }
