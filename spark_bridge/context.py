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

Both come from :mod:`topology_api.stormconf`, which the Storm engine builds its
tasks' conf and context with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from topology_api.stormconf import (
    ACKER_COMPONENT,
    COMPONENT_OVERRIDABLE_KEYS,
    STORM_DEFAULTS,
    assign_task_ids,
    component_conf,
    task_context,
    topology_conf,
)
from topology_api.topology import LoadedTopology

__all__ = [
    "ACKER_COMPONENT",
    "COMPONENT_OVERRIDABLE_KEYS",
    "STORM_DEFAULTS",
    "storm_conf",
    "storm_context",
    "task_ids",
]

#: Conf keys the bridge removes: they would make storm_bridge open its own ring.
#: Keys that would make storm_bridge open a ring or run its native checkpoint
#: protocol inside a Spark task; on Spark the bridge writes the state.
_STORM_RING_KEYS: Final = ("sr3.zk.hosts", "sr3.checkpoint.mode")


def _topology_conf(
    topology: LoadedTopology, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    return topology_conf(topology.name, topology.config, overrides)


def storm_conf(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the Storm conf a task of ``component`` receives (module docstring).

    The ``sr3.zk.hosts`` and ``sr3.checkpoint.mode`` keys are dropped so
    storm_bridge neither opens a ring nor runs its native protocol itself: on
    Spark the bridge writes the state.
    """
    conf = component_conf(
        _topology_conf(topology, overrides), topology.components[component].config
    )
    for key in _STORM_RING_KEYS:
        conf.pop(key, None)
    return conf


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
    return assign_task_ids(topology, _acker_tasks(_topology_conf(topology, overrides)))


def storm_context(
    topology: LoadedTopology,
    component: str,
    index: int,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the handshake ``context`` of task ``index`` of ``component``."""
    ids = task_ids(topology, overrides or {})
    own = [task for task, name in sorted(ids.items()) if name == component]
    return task_context(topology, own[index % len(own)], ids)
