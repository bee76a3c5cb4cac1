"""What Storm hands a task: its conf and its handshake context.

Both engines build them here, so a bolt sees the same ``initialize(conf,
context)`` on the local cluster, on Spark and on a Storm cluster:

- **conf**: Storm's ``defaults.yaml`` values < the topology class's ``config`` <
  the run's overrides (``sparse submit -o``, ``sr3 run -o``); then each
  component's own conf overrides the few Storm keys Storm lets a component
  override (``Executor.normalizedComponentConf``) and any non-Storm key;
- **task ids**: Storm's ``StormCommon.stormTaskInfo``: components (the acker
  ``__acker`` included) sorted by id in Java string order, numbered from 1, each
  getting as many consecutive ids as it has tasks;
- **context**: what ``TopologyContext.toJSONString`` sends a multilang task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from topology_api.topology import LoadedTopology

__all__ = [
    "ACKER_COMPONENT",
    "COMPONENT_OVERRIDABLE_KEYS",
    "STORM_DEFAULTS",
    "STORM_KEY_PREFIXES",
    "assign_task_ids",
    "component_conf",
    "is_storm_key",
    "java_order",
    "task_context",
    "topology_conf",
]

ACKER_COMPONENT: Final = "__acker"
#: The subset of Storm's ``defaults.yaml`` the local cluster reads or passes on.
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

#: Storm keys a component's own conf may override (everything else Storm drops).
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
STORM_KEY_PREFIXES: Final = (
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


def topology_conf(
    name: str, class_conf: Mapping[str, Any], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the topology-wide conf: defaults, class conf, overrides, name."""
    conf = dict(STORM_DEFAULTS)
    conf.update(class_conf)
    conf.update(overrides)
    conf["topology.name"] = name
    return conf


def is_storm_key(key: str) -> bool:
    """Whether ``key`` is one of Storm's own (``topology.*`` and the like)."""
    return key.startswith(STORM_KEY_PREFIXES)


def component_conf(
    topo_conf: Mapping[str, Any], own: Mapping[str, Any]
) -> dict[str, Any]:
    """Return a component's effective conf, as Storm's executors compute it."""
    conf = dict(topo_conf)
    for key, value in own.items():
        if key in COMPONENT_OVERRIDABLE_KEYS or not is_storm_key(key):
            conf[key] = value
    return conf


def java_order(component_id: str) -> bytes:
    """Sort key of Java's ``String.compareTo`` (UTF-16 code units)."""
    return component_id.encode("utf-16-be")  # String.compareTo compares UTF-16 units


def assign_task_ids(topology: LoadedTopology, acker_tasks: int) -> dict[int, str]:
    """Return task id -> component id for every task, the acker's included."""
    counts = {name: comp.tasks for name, comp in topology.components.items()}
    if acker_tasks > 0:
        counts[ACKER_COMPONENT] = acker_tasks
    task_to_component: dict[int, str] = {}
    next_id = 1
    for name in sorted(counts, key=java_order):
        for _ in range(counts[name]):
            task_to_component[next_id] = name
            next_id += 1
    return task_to_component


def task_context(
    topology: LoadedTopology, task_id: int, task_to_component: Mapping[int, str]
) -> dict[str, Any]:
    """Return the ``context`` map of the handshake for ``task_id``."""
    name = task_to_component[task_id]
    comp = topology.components[name]
    targets: dict[str, dict[str, Any]] = {}
    for other in topology.components.values():
        for sub in other.inputs:
            if sub.source == name:
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
        "task->component": {str(t): c for t, c in task_to_component.items()},
        "taskid": task_id,
        "componentid": name,
        "streams": list(comp.outputs),
        "stream->outputfields": {s: list(o.fields) for s, o in comp.outputs.items()},
        "stream->target->grouping": targets,
        "source->stream->grouping": sources,
        "source->stream->fields": source_fields,
    }
