"""What the local cluster refuses to run, checked before any task starts.

Storm itself would accept these topologies and fail later, tuple by tuple (a
stateful bolt without a key) or not at all on a JVM (a Java custom grouping);
here they would crash the cluster or fill the report with one traceback per
tuple, so they are refused up front, naming the component and the fix.
"""

from __future__ import annotations

from typing import Final

from topology_api.component_specs import ComponentInfo, InputInfo
from topology_api.contract import StatefulComponent, overrides_state_key
from topology_api.errors import TopologyError
from topology_api.groupings import GroupingKind
from topology_api.partial_key import PARTIAL_KEY_CLASS
from topology_api.topology import LoadedTopology

__all__ = ["check_runnable"]

_JAVA_GROUPINGS: Final = frozenset(
    {GroupingKind.CUSTOM_OBJECT, GroupingKind.CUSTOM_SERIALIZED}
)


def _keyed_by_grouping(component: ComponentInfo) -> bool:
    """Whether the component's state is keyed by its fields groupings' values."""
    cls = component.component_cls
    return (
        component.kind == "bolt"
        and issubclass(cls, StatefulComponent)
        and not overrides_state_key(cls)
    )


def _where(component: ComponentInfo, sub: InputInfo) -> str:
    return (
        f"component {component.name!r} subscribes to stream {sub.stream!r} of "
        f"{sub.source!r} with a {sub.grouping.kind.value} grouping"
    )


def _java_grouping_refusal(
    topology: LoadedTopology, component: ComponentInfo, sub: InputInfo
) -> str:
    spec = sub.grouping
    if spec.java_class == PARTIAL_KEY_CLASS:
        return (
            f"{topology.path}: {_where(component, sub)} of {PARTIAL_KEY_CLASS} "
            f"with arguments {list(spec.java_args)}; Storm has no such constructor "
            "(Thrift cannot pass it a Fields): use "
            "storm_bridge.partial_key_grouping('field', ...), which sends it "
            "serialized"
        )
    named = f" ({spec.java_class})" if spec.java_class else ""
    return (
        f"{topology.path}: {_where(component, sub)}{named}, a Java class the local "
        f"multilang cluster cannot run; use a shuffle, fields or partial-key "
        "grouping (storm_bridge.partial_key_grouping())"
    )


def check_runnable(topology: LoadedTopology) -> None:
    """Refuse what the local multilang cluster cannot run correctly.

    Raises:
        TopologyError: a subscription uses a Java custom grouping other than
            Storm's ``PartialKeyGrouping`` (as ``partial_key_grouping`` sends
            it), or a ``StatefulBolt`` keyed by its grouping (no ``state_key`` override)
            subscribes without a fields grouping, so its tuples have no key.
    """
    for component in topology.components.values():
        keyed = _keyed_by_grouping(component)
        for sub in component.inputs:
            kind = sub.grouping.kind
            if kind in _JAVA_GROUPINGS and not sub.grouping.is_partial_key:
                raise TopologyError(_java_grouping_refusal(topology, component, sub))
            if keyed and kind is not GroupingKind.FIELDS:
                msg = (
                    f"{topology.path}: {_where(component, sub)}, but it is a "
                    "StatefulBolt whose state is keyed by its fields grouping, so "
                    "those tuples would have no key; subscribe with "
                    "Grouping.fields(...) or override state_key(tup)"
                )
                raise TopologyError(msg)
