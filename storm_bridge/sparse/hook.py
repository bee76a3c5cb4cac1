"""The generation field for a topology streamparse's ``sparse submit`` builds.

``sparse submit`` imports the topology file, calls the project's ``pre_submit``
hook (``tasks.py``), then, in this order: sets every component whose execution
command contains ``streamparse_run`` to
``virtualenv_root/virtualenv_name/bin/streamparse_run``, prepends
``-s SERIALIZER`` to every shell component's script, and submits the topology
class's own Thrift with the options as its conf.

In native checkpoint mode :func:`fence_sparse_submit`, called by the hook, does
what ``sr3 run`` does at submit
(:func:`~storm_bridge.sparse.submit.python_components`): each Python component
declares :data:`~storm_bridge.messages.HIDDEN_GENERATION_FIELD` last on its
streams and runs through :mod:`storm_bridge.generation_field`, and the conf
sets :data:`~storm_bridge.messages.GENERATION_FIELD_KEY`. The command is the
console script :data:`~storm_bridge.generation_field.LAUNCHER` of the same
virtualenv: its name has no ``streamparse_run`` (streamparse leaves it be) and
it takes ``streamparse_run``'s arguments, ``-s SERIALIZER`` included (a
``python -c`` script would not survive that prefix). Those components also get
the rollback's warm-up stream (:func:`~storm_bridge.sparse.submit.declare_warmup`).

``-o sr3.storm.generation.field=false`` turns it off (stragglers are then
fenced by the rollback quiet time alone); without native mode nothing changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any

from streamparse.dsl.topology import Topology, TopologyType

from sr3.errors import ConfigError
from storm_bridge.generation_field import LAUNCHER
from storm_bridge.messages import GENERATION_FIELD_KEY
from storm_bridge.native import MODE_KEY, NATIVE
from storm_bridge.sparse.submit import (
    SubmitError,
    declare_generation_field,
    declare_warmup,
    shell_components,
)
from topology_api.component_specs import component_info, fixed_counts
from topology_api.contract import fixed_parallelism, is_stateful_class
from topology_api.topology import STREAMPARSE_RUN

__all__ = [
    "check_fixed_counts",
    "fixed_components",
    "fence_generations",
    "fence_sparse_submit",
    "launcher_path",
    "submitted_topology",
]

#: streamparse's function that calls ``pre_submit``, and its local holding the
#: topology class it imported (streamparse 5's ``streamparse.cli.submit``).
_SUBMIT_MODULE = "streamparse.cli.submit"
_SUBMIT_FUNCTION = "submit_topology"
_TOPOLOGY_LOCAL = "topology_class"


def submitted_topology() -> type[Topology]:
    """Return the ``Topology`` class the running ``sparse submit`` submits.

    streamparse passes the hook no topology; it is the ``topology_class``
    local of streamparse's ``submit_topology``, the hook's caller. (Several
    topology classes may be loaded: a topology file importing another's
    components loads that file's topology too.)

    Raises:
        SubmitError: not called from within ``sparse submit``.
    """
    # the caller's frames are the only place streamparse keeps it
    frame: FrameType | None = sys._getframe(1)  # noqa: SLF001
    while frame is not None:
        if (
            frame.f_code.co_name == _SUBMIT_FUNCTION
            and frame.f_globals.get("__name__") == _SUBMIT_MODULE
        ):
            found: Any = frame.f_locals.get(_TOPOLOGY_LOCAL)
            if isinstance(found, TopologyType) and found is not Topology:
                topology: type[Topology] = found
                return topology
        frame = frame.f_back
    msg = (
        f"no topology found: storm_bridge.sparse.hook must run inside streamparse's "
        f"`sparse submit` ({_SUBMIT_MODULE}.{_SUBMIT_FUNCTION} with a "
        f"{_TOPOLOGY_LOCAL}), called from the project's tasks.py pre_submit"
    )
    raise SubmitError(msg)


def launcher_path(topology_name: str, options: MutableMapping[str, Any]) -> str:
    """Return the command the workers run each Python component with.

    The :data:`~storm_bridge.generation_field.LAUNCHER` beside the
    ``streamparse_run`` streamparse will choose: in
    ``virtualenv_root/virtualenv_name/bin/`` (``virtualenv_name`` defaults to
    the topology's name) with ``use_virtualenv``, else on the workers' PATH.
    """
    if not options.get("use_virtualenv", True):
        return LAUNCHER
    # streamparse keeps its settings in fabric 1's global env (untyped)
    from fabric.api import env  # type: ignore[import-untyped]  # noqa: PLC0415

    venv = options.get("virtualenv_name", topology_name)
    return "/".join([str(env.virtualenv_root), str(venv), "bin", LAUNCHER])


def fence_generations(
    topology_class: type[Topology],
    options: MutableMapping[str, Any],
    *,
    launcher: str,
) -> list[str]:
    """Give the Python components of ``topology_class`` the hidden field.

    Each component streamparse would run with ``streamparse_run`` runs
    ``launcher`` instead (its script, ``module.Class``, is kept) and declares
    the field on its streams; ``options`` (the topology conf) gets the marker.
    Returns the components changed.
    """
    changed = []
    for name, shell, common in shell_components(topology_class):
        if STREAMPARSE_RUN not in str(shell.execution_command):
            continue
        shell.execution_command = launcher
        declare_generation_field(common, on=True)
        changed.append(name)
    declare_warmup(topology_class, changed)
    options[GENERATION_FIELD_KEY] = True
    return changed


def fence_sparse_submit(
    topology_name: str, options: MutableMapping[str, Any], *, local: bool
) -> list[str]:
    """Fence the generations of the topology ``sparse submit`` submits.

    Only in native checkpoint mode, unless the options set
    ``sr3.storm.generation.field`` false. ``local``: the workers' virtualenv
    is on this machine, where the launcher must then exist. Returns the
    components changed.

    Raises:
        SubmitError: the local virtualenv has no launcher, or not called from
            within ``sparse submit``.
    """
    if options.get(MODE_KEY) != NATIVE or options.get(GENERATION_FIELD_KEY) is False:
        return []
    launcher = launcher_path(topology_name, options)
    if local and not Path(launcher).is_file():
        msg = (
            f"{launcher} does not exist: native checkpoint mode runs the Python "
            f"components with the virtualenv's {LAUNCHER}; reinstall the project "
            "there (`pip install -e .`, or make setup)"
        )
        raise SubmitError(msg)
    return fence_generations(submitted_topology(), options, launcher=launcher)


def fixed_components(
    topology_class: type[Topology], environment: str | None
) -> dict[str, tuple[int, str]]:
    """``{component: (tasks, why)}`` of the bolts whose task count is fixed.

    Bolts that keep their state per task (``sr3_fixed_parallelism``, e.g.
    ``KafkaSink``), at the task count ``environment`` gives them.
    """
    # only Python bolts can be stateful: Java components (which the local
    # cluster cannot describe) are left out before anything is read
    candidates = [
        spec
        for spec in topology_class.specs
        if isinstance(cls := getattr(spec, "component_cls", None), type)
        and is_stateful_class(cls)
        and fixed_parallelism(cls) is not None
    ]
    return fixed_counts(
        component_info(spec, environment, is_stateful_class) for spec in candidates
    )


def check_fixed_counts(
    topology_name: str,
    conf: Mapping[str, Any],
    fixed: Mapping[str, tuple[int, str]],
) -> None:
    """Refuse to submit a fixed-count bolt at another count than its committed epoch.

    Tasks of a topology with a ring (``sr3.zk.hosts`` in ``conf``) start from
    its committed epoch; a bolt of ``fixed`` (:func:`fixed_components`) must
    then have as many tasks as that epoch was written with, as
    ``sr3 run --resume`` checks.

    Raises:
        ConfigError: a count differs (naming both, the reason and the fix).
        CoordinationError: ZooKeeper is unreachable.
    """
    if not fixed or not conf.get("sr3.zk.hosts"):
        return
    # ring clients only for a topology that has such a bolt and a ring
    from backend.access import RingAccess  # noqa: PLC0415 (ring clients on demand)
    from backend.committer import check_fixed  # noqa: PLC0415 (with them)

    ring = RingAccess.from_conf(conf)
    if ring is None:  # pragma: no cover - sr3.zk.hosts checked above
        return
    try:
        record = ring.committed(topology_name)
    finally:
        ring.close()
    if record is None:
        return
    try:
        check_fixed(record, topology_name, fixed)
    except ConfigError as exc:
        msg = (
            f"{exc} (sparse submit: the tasks start from the committed epoch "
            "whenever the topology has one)"
        )
        raise ConfigError(msg) from exc
