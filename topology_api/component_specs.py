"""A topology's components as plain data, read from streamparse's DSL specs.

streamparse's ``Topology`` subclass holds one spec per component (its class,
shell command, parallelism, declared streams and subscriptions with their
Thrift groupings); :func:`component_info` turns one into a
:class:`ComponentInfo`, and :func:`validate_components` refuses what Nimbus
would refuse (reserved ids, a subscription to an undeclared stream, a direct
stream with a regular grouping or the reverse), naming the file and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from streamparse.dsl.bolt import JavaBoltSpec, ShellBoltSpec
from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec

from topology_api.contract import fixed_parallelism
from topology_api.errors import TopologyError
from topology_api.groupings import GroupingKind, GroupingSpec
from topology_api.java_serial import partial_key_fields
from topology_api.partial_key import PARTIAL_KEY_CLASS

__all__ = [
    "ComponentInfo",
    "InputInfo",
    "OutputStream",
    "component_info",
    "fixed_counts",
    "validate_components",
]

#: Component and stream ids starting with this are Storm's own.
_SYSTEM_PREFIX: Final = "__"
_THRIFT_GROUPING_KINDS: Final = {
    "fields": GroupingKind.FIELDS,
    "shuffle": GroupingKind.SHUFFLE,
    "all": GroupingKind.ALL,
    "none": GroupingKind.NONE,
    "direct": GroupingKind.DIRECT,
    "custom_object": GroupingKind.CUSTOM_OBJECT,
    "custom_serialized": GroupingKind.CUSTOM_SERIALIZED,
    "local_or_shuffle": GroupingKind.LOCAL_OR_SHUFFLE,
}


@dataclass(frozen=True)
class OutputStream:
    """A stream a component declares.

    Attributes:
        name: Stream id.
        fields: Output field names.
        direct: Whether tuples reach subscribers only by direct emits.
    """

    name: str
    fields: tuple[str, ...]
    direct: bool = False


@dataclass(frozen=True)
class InputInfo:
    """One subscription of a bolt: a source component's stream and its grouping.

    Attributes:
        source: Component id emitting the stream.
        stream: Stream id.
        grouping: How the stream's tuples are spread over the bolt's tasks.
    """

    source: str
    stream: str
    grouping: GroupingSpec


@dataclass(frozen=True)
class ComponentInfo:
    """A spout or bolt of a topology.

    Attributes:
        name: Component id.
        kind: ``spout`` or ``bolt``.
        component_cls: The Python class (streamparse ``Spout``/``Bolt`` subclass).
        command: Executable Storm runs (``streamparse_run`` for Python components).
        script: Its single argument, ``module.Class`` for Python components.
        par: Parallelism hint (executors; here one process per task).
        tasks: Number of tasks (``topology.tasks`` of the component conf, else ``par``).
        config: Component-specific Storm conf.
        outputs: Declared streams by id.
        inputs: Subscriptions (bolts only).
        stateful: Whether the class declares itself stateful.
    """

    name: str
    kind: Literal["spout", "bolt"]
    component_cls: type
    command: str
    script: str
    par: int
    tasks: int
    config: Mapping[str, Any]
    outputs: Mapping[str, OutputStream]
    inputs: tuple[InputInfo, ...] = ()
    stateful: bool = False

    @property
    def class_path(self) -> str:
        """``module.Class`` of the component class."""
        return f"{self.component_cls.__module__}.{self.component_cls.__name__}"


def _java_arg(arg: Any) -> Any:
    """The one value a Thrift ``JavaObjectArg`` union sets."""
    values = [v for v in vars(arg).values() if v is not None]
    return values[0] if values else None


def _grouping_spec(grouping: Any) -> GroupingSpec:
    for attr, kind in _THRIFT_GROUPING_KINDS.items():
        value = getattr(grouping, attr, None)
        if value is not None:
            if kind is GroupingKind.CUSTOM_OBJECT:
                args = tuple(_java_arg(a) for a in value.args_list or ())
                return GroupingSpec(kind, java_class=value.full_class_name,
                                    java_args=args)  # fmt: skip
            if kind is GroupingKind.CUSTOM_SERIALIZED:
                fields = partial_key_fields(bytes(value))
                if fields is not None:
                    return GroupingSpec(kind, fields, java_class=PARTIAL_KEY_CLASS)
            fields = tuple(value) if kind is GroupingKind.FIELDS else ()
            return GroupingSpec(kind, fields)
    msg = f"grouping {grouping!r} sets no Storm grouping type"
    raise TopologyError(msg)


def _resolve_par(spec: Any, environment: str | None) -> int:
    par = spec.par
    if isinstance(par, dict):
        if environment is None or environment not in par:
            msg = (
                f"component {spec.name!r} gives parallelism per environment {par}; "
                "pick one with -e/--environment (environment= from Python)"
            )
            raise TopologyError(msg)
        par = par[environment]
    return int(par)


def component_info(
    spec: Any, environment: str | None, stateful: Callable[[type], bool]
) -> ComponentInfo:
    """Describe the component of a streamparse DSL ``spec``.

    Args:
        spec: A ``ShellBoltSpec`` or ``ShellSpoutSpec`` of the topology class.
        environment: Environment name resolving ``par={env: n}`` dicts.
        stateful: Tells whether a component class is stateful.

    Raises:
        TopologyError: a Java component, a reserved id, or a parallelism per
            environment without an environment.
    """
    name = spec.name
    if isinstance(spec, JavaBoltSpec | JavaSpoutSpec):
        msg = (
            f"component {name!r} is a Java component; the local cluster runs shell ones"
        )
        raise TopologyError(msg)
    if not isinstance(spec, ShellBoltSpec | ShellSpoutSpec):
        msg = f"component {name!r} is neither a shell spout nor a shell bolt"
        raise TopologyError(msg)
    if name.startswith(_SYSTEM_PREFIX):
        msg = f"component id {name!r} is reserved: ids starting with '__' are Storm's"
        raise TopologyError(msg)
    kind: Literal["spout", "bolt"] = (
        "spout" if isinstance(spec, ShellSpoutSpec) else "bolt"
    )
    config = (
        json.loads(spec.config)
        if isinstance(spec.config, str)
        else dict(spec.config or {})
    )
    par = _resolve_par(spec, environment)
    shell = spec.component_object.shell
    outputs = {
        name: OutputStream(name, tuple(info.output_fields), bool(info.direct))
        for name, info in spec.outputs.items()
    }
    inputs = tuple(
        InputInfo(stream_id.componentId, stream_id.streamId, _grouping_spec(grouping))
        for stream_id, grouping in spec.inputs.items()
    )
    return ComponentInfo(
        name=spec.name,
        kind=kind,
        component_cls=spec.component_cls,
        command=shell.execution_command,
        script=shell.script,
        par=par,
        tasks=int(config.get("topology.tasks") or par),
        config=config,
        outputs=outputs,
        inputs=inputs,
        stateful=stateful(spec.component_cls),
    )


def validate_components(components: Mapping[str, ComponentInfo], path: Path) -> None:
    """Refuse reserved stream ids and inconsistent subscriptions in ``path``.

    Raises:
        TopologyError: what Nimbus would refuse, named with the fix.
    """
    for comp in components.values():
        _check_ids(comp, path)
        for sub in comp.inputs:
            source = components.get(sub.source)
            stream = source.outputs.get(sub.stream) if source else None
            where = f"{path}: component {comp.name!r} subscribes to"
            if stream is None:
                msg = (
                    f"{where} stream {sub.stream!r} of {sub.source!r}, "
                    "which does not declare it"
                )
                raise TopologyError(msg)
            if stream.direct != (sub.grouping.kind is GroupingKind.DIRECT):
                nature = "direct" if stream.direct else "regular"
                msg = (
                    f"{where} {nature} stream {sub.stream!r} of {sub.source!r} with a "
                    f"{sub.grouping.kind.value} grouping; direct streams need "
                    "Grouping.DIRECT and only direct streams may use it"
                )
                raise TopologyError(msg)


def _check_ids(comp: ComponentInfo, path: Path) -> None:
    """Refuse stream ids Nimbus refuses: Storm reserves those starting with ``__``."""
    for stream in comp.outputs:
        if stream.startswith(_SYSTEM_PREFIX):
            msg = (
                f"{path}: stream id {stream!r} of component {comp.name!r} is "
                "reserved: ids starting with '__' are Storm's (Nimbus rejects the "
                "topology); rename the stream"
            )
            raise TopologyError(msg)


def fixed_counts(components: Iterable[ComponentInfo]) -> dict[str, tuple[int, str]]:
    """``{component: (tasks, why)}`` of stateful bolts whose count is fixed.

    See :attr:`~topology_api.contract.StatefulComponent.sr3_fixed_parallelism`.
    """
    found = {}
    for c in components:
        reason = fixed_parallelism(c.component_cls) if c.stateful else None
        if reason is not None:
            found[c.name] = (c.tasks, reason)
    return found
