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
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from streamparse import Topology
from streamparse.thrift import StormTopology
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.transport import TMemoryBuffer

from topology_api.component_specs import (
    ComponentInfo,
    component_info,
    fixed_counts,
    validate_components,
)
from topology_api.contract import is_stateful_class
from topology_api.errors import TopologyError

__all__ = [
    "STREAMPARSE_RUN",
    "LoadedTopology",
    "load_topology",
    "read_thrift",
    "thrift_bytes",
]

#: The command streamparse gives every Python component.
STREAMPARSE_RUN: Final = "streamparse_run"
#: A streamparse project's component directory, beside ``topologies/``.
_PROJECT_SRC: Final = "src"


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

    def downstream(self) -> dict[str, frozenset[str]]:
        """``{component: the bolts its tuples reach}``, directly or through others.

        Every stream counts, the system streams of a topology included; a cycle
        (a bolt subscribing to one downstream of it) is followed once.
        """
        direct: dict[str, set[str]] = {name: set() for name in self.components}
        for comp in self.components.values():
            for sub in comp.inputs:
                direct.setdefault(sub.source, set()).add(comp.name)
        reach: dict[str, frozenset[str]] = {}
        for name, bolts in direct.items():
            seen: set[str] = set()
            todo = list(bolts)
            while todo:
                bolt = todo.pop()
                if bolt not in seen:
                    seen.add(bolt)
                    todo.extend(direct.get(bolt, ()))
            reach[name] = frozenset(seen)
        return reach

    def fixed_parallelism(self) -> dict[str, tuple[int, str]]:
        """``{component: (tasks, why)}`` of stateful bolts whose count is fixed.

        See :attr:`~topology_api.contract.StatefulComponent.sr3_fixed_parallelism`.
        """
        return fixed_counts(self.components.values())

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
        spec.name: component_info(spec, environment, stateful)
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
    validate_components(components, resolved)
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
