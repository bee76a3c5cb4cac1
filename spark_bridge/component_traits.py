"""What the Spark bridge reads off a component class and its conf before hosting it.

Whether a bolt acts on tick tuples (:func:`ticks`, as Storm ticks it only when
``topology.tick.tuple.freq.secs`` is set). Whether a stateful bolt keys its
state otherwise than by its grouping is the contract's
(:func:`topology_api.contract.overrides_state_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pystorm.bolt import BatchingBolt
from pystorm.bolt import Bolt as StormBolt

from spark_bridge.context import storm_conf
from topology_api.topology import LoadedTopology

__all__ = [
    "TICK_FREQ_KEY",
    "emits_on_ticks",
    "tick_freq_s",
    "ticks",
]

#: Storm conf key of the tick tuple period (the value a tick tuple carries).
TICK_FREQ_KEY: Final = "topology.tick.tuple.freq.secs"


def emits_on_ticks(cls: type) -> bool:
    """Whether a bolt class does anything on a tick tuple.

    A ``BatchingBolt`` processes its batches; another bolt overrides
    ``process_tick`` (a ``StatefulBolt`` included).
    """
    if issubclass(cls, BatchingBolt):
        return True
    return getattr(cls, "process_tick", None) is not StormBolt.process_tick


def ticks(
    topology: LoadedTopology, component: str, overrides: Mapping[str, Any]
) -> bool:
    """Whether ``component`` gets tick tuples that it acts on, as on Storm.

    Storm ticks a bolt only when its conf sets ``topology.tick.tuple.freq.secs``
    (the topology's, ``-o`` or the component's ``config=``).
    """
    info = topology.components[component]
    if info.kind != "bolt":
        return False
    freq = tick_freq_s(storm_conf(topology, component, overrides))
    return freq is not None and emits_on_ticks(info.component_cls)


def tick_freq_s(conf: Mapping[str, Any]) -> float | None:
    """Return a task's tick period: ``topology.tick.tuple.freq.secs``.

    None (no tick tuples) when unset, zero or not a number, as the Storm
    engine reads it.
    """
    try:
        freq = float(conf.get(TICK_FREQ_KEY) or 0)
    except (TypeError, ValueError):
        return None
    return freq if freq > 0 else None
