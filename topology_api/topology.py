"""Load a streamparse ``Topology`` from a file and describe it as plain data.

The topology file may live anywhere. It is imported under its file stem (which is
also the topology name, as ``sparse`` uses it), with its directory, the project's
``src/`` beside it (streamparse's layout) and any extra paths on ``sys.path`` for
the import; the same paths are what a task subprocess needs on ``PYTHONPATH``,
because streamparse names components ``module.Class``.
The Thrift ``StormTopology`` is the one streamparse's DSL builds itself.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Literal

from streamparse import Topology
from streamparse.dsl.bolt import JavaBoltSpec, ShellBoltSpec
from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec
from streamparse.thrift import StormTopology
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.transport import TMemoryBuffer

from topology_api.contract import fixed_parallelism, is_stateful_class
from topology_api.errors import TopologyError
from topology_api.groupings import GroupingKind, GroupingSpec
from topology_api.java_serial import partial_key_fields
from topology_api.partial_key import PARTIAL_KEY_CLASS

__all__ = [
    "STREAMPARSE_RUN",
    "ComponentInfo",
    "InputInfo",
    "LoadedTopology",
    "OutputStream",
    "load_topology",
    "read_thrift",
    "thrift_bytes",
]

#: The command streamparse gives every Python component.
STREAMPARSE_RUN: Final = "streamparse_run"
_SYSTEM_PREFIX: Final = "__"
#: A streamparse project's component directory, beside ``topologies/``.
_PROJECT_SRC: Final = "src"
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


@dataclass(frozen=True)
class LoadedTopology:
    """A topology file, imported and described.

    Attributes:
        name: Topology name: the file stem.
        path: Absolute path of the topology file.
        sys_paths: Import paths the components need (file directory first).
        topology_class: The streamparse ``Topology`` subclass.
        config: The topology class's ``config``.
        components: Components by id, in definition order.
    """

    name: str
    path: Path
    sys_paths: tuple[str, ...]
    topology_class: type
    config: Mapping[str, Any]
    components: Mapping[str, ComponentInfo] = field(default_factory=dict)

    @property
    def spouts(self) -> list[ComponentInfo]:
        """The spouts, in definition order."""
        return [c for c in self.components.values() if c.kind == "spout"]

    @property
    def bolts(self) -> list[ComponentInfo]:
        """The bolts, in definition order."""
        return [c for c in self.components.values() if c.kind == "bolt"]

    @property
    def stateful_components(self) -> list[str]:
        """Ids of the components whose class declares itself stateful."""
        return [c.name for c in self.components.values() if c.stateful]

    def fixed_parallelism(self) -> dict[str, tuple[int, str]]:
        """``{component: (tasks, why)}`` of stateful bolts whose count is fixed.

        See :attr:`~topology_api.contract.StatefulComponent.sr3_fixed_parallelism`.
        """
        found = {}
        for c in self.components.values():
            reason = fixed_parallelism(c.component_cls) if c.stateful else None
            if reason is not None:
                found[c.name] = (c.tasks, reason)
        return found

    def task_problem(self, component: str, index: int) -> str | None:
        """Why task ``component:index`` is not one of this topology's (None: it is).

        The words a ``--kill``, ``--freeze`` or fault on a task that does not
        exist is refused with, after its own label.
        """
        comp = self.components.get(component)
        if comp is None:
            known = ", ".join(self.components)
            return (
                f"topology {self.name!r} has no component {component!r} "
                f"(components: {known})"
            )
        if not 0 <= index < comp.tasks:
            return f"component {component!r} has tasks 0..{comp.tasks - 1}"
        return None

    @property
    def thrift(self) -> Any:
        """The ``StormTopology`` streamparse built for this topology."""
        return self.topology_class.thrift_topology  # type: ignore[attr-defined]


@contextmanager
def _sys_path(paths: Sequence[str]) -> Iterator[None]:
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        yield
    finally:
        sys.path[:] = saved


def _import_file(path: Path, module_name: str) -> ModuleType:
    existing = sys.modules.get(module_name)
    if existing is not None:
        existing_file = getattr(existing, "__file__", None)
        if existing_file is not None and Path(existing_file).resolve() == path:
            return existing
        msg = (
            f"topology file {path} cannot be imported as module {module_name!r}: "
            f"that name is already taken by {existing_file or 'a built-in module'}; "
            "rename the topology file"
        )
        raise TopologyError(msg)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        msg = f"{path} cannot be imported as a Python module"
        raise TopologyError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        # SystemExit too: a file that calls sys.exit() at import must not end
        # the command silently (KeyboardInterrupt still stops it)
        del sys.modules[module_name]
        msg = f"importing topology file {path} failed: {type(exc).__name__}: {exc}"
        raise TopologyError(msg) from exc
    return module


def _find_topology_class(
    module: ModuleType, path: Path, class_name: str | None
) -> type:
    candidates = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Topology) and obj is not Topology
    ]
    if class_name is not None:
        candidates = [c for c in candidates if c.__name__ == class_name]
    own = [c for c in candidates if c.__module__ == module.__name__]
    chosen = own or candidates
    if len(chosen) != 1:
        names = sorted(c.__name__ for c in chosen)
        msg = (
            f"{path} must define exactly one streamparse Topology subclass, "
            f"found {names or 'none'}; keep one per file, as `sparse submit` "
            "takes one topology per file (import shared components instead)"
        )
        raise TopologyError(msg)
    return chosen[0]


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


def _component(
    spec: Any, environment: str | None, stateful: Callable[[type], bool]
) -> ComponentInfo:
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


def _validate(components: Mapping[str, ComponentInfo], path: Path) -> None:
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


def load_topology(
    path: str | Path,
    *,
    class_name: str | None = None,
    extra_paths: Sequence[str | Path] = (),
    environment: str | None = None,
    stateful: Callable[[type], bool] = is_stateful_class,
    parallelism: Mapping[str, int] | None = None,
) -> LoadedTopology:
    """Import a topology file and describe its components.

    As streamparse does, the file's directory and, in a streamparse project
    (``topologies/`` beside ``src/``), the project's ``src/`` are on the import
    path, for the topology file and for every task.

    Args:
        path: The topology file (``topologies/wordcount.py``).
        class_name: Which ``Topology`` subclass to use when the file has several.
        extra_paths: More import paths for the components (a project's ``src/``).
        environment: Environment name resolving ``par={env: n}`` dicts.
        stateful: Tells whether a component class is stateful.
        parallelism: ``{component: tasks}`` replacing the file's task count
            (and ``par``) of those components: a rebalanced run's.

    Returns:
        The topology, named after the file stem.

    Raises:
        TopologyError: the file is missing, fails to import, holds no single
            Topology, uses Java components, or subscribes inconsistently, or
            ``parallelism`` names an unknown component or a count below 1.
    """
    resolved = Path(path).resolve()
    if not resolved.is_file():
        msg = f"topology file {resolved} does not exist"
        raise TopologyError(msg)
    project_src = resolved.parent.parent / _PROJECT_SRC
    sys_paths = tuple(
        dict.fromkeys(
            [
                str(resolved.parent),
                *([str(project_src)] if project_src.is_dir() else []),
                *(str(Path(p).resolve()) for p in extra_paths),
            ]
        )
    )
    with _sys_path(sys_paths):
        module = _import_file(resolved, resolved.stem)
    topology_class = _find_topology_class(module, resolved, class_name)
    components = {
        spec.name: _component(spec, environment, stateful)
        for spec in topology_class.specs  # type: ignore[attr-defined]
    }
    for name, tasks in (parallelism or {}).items():
        if name not in components or tasks < 1:
            msg = (
                f"topology {resolved.stem!r}: cannot run component {name!r} at "
                f"{tasks} tasks (its components: {', '.join(sorted(components))})"
            )
            raise TopologyError(msg)
        components[name] = replace(components[name], par=tasks, tasks=tasks)
    _validate(components, resolved)
    return LoadedTopology(
        name=resolved.stem,
        path=resolved,
        sys_paths=sys_paths,
        topology_class=topology_class,
        config=dict(topology_class.config),  # type: ignore[attr-defined]
        components=components,
    )


def thrift_bytes(topology: LoadedTopology) -> bytes:
    """Return the ``StormTopology`` as Nimbus receives it (Thrift binary protocol)."""
    buffer = io.BytesIO()
    topology.topology_class.write(buffer)  # type: ignore[attr-defined]
    return buffer.getvalue()


def read_thrift(data: bytes) -> Any:
    """Decode a Thrift-binary ``StormTopology``."""
    topology = StormTopology()
    buffer: Any = TMemoryBuffer
    protocol: Any = TBinaryProtocol
    topology.read(protocol(buffer(data)))
    return topology
