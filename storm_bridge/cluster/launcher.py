"""How the local cluster starts a task's subprocess: its argv, cwd and environment.

:class:`Launcher` builds the :class:`TaskProcess` of a task's next incarnation
(or of a straggler's duplicate) the way Storm's supervisor runs a component's
command after ``sparse submit`` rewrote it (:func:`component_argv`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from storm_bridge.cluster.forkserver import ForkServer
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.multilang import Serializer
from topology_api.component_specs import ComponentInfo
from topology_api.topology import STREAMPARSE_RUN, LoadedTopology

__all__ = ["Launcher", "component_argv"]


def component_argv(
    component: ComponentInfo, *, serializer: str, bin_dir: Path
) -> list[str]:
    """Return the argv Storm runs for a component, as ``sparse submit`` rewrites it.

    ``streamparse_run`` resolves to ``bin_dir`` (the virtualenv's bin directory) and
    gets ``-s <serializer>`` in its script unless the serializer is JSON. As in
    ShellBolt, the script is one argument; ``streamparse_run`` splits it.
    """
    command, script = component.command, component.script
    if command == STREAMPARSE_RUN:
        command = str(bin_dir / STREAMPARSE_RUN)
        if serializer != "json":
            script = f"-s {serializer} {script}"
    return [command, script] if script else [command]


@dataclass(frozen=True)
class Launcher:
    """How task subprocesses are started.

    Attributes:
        topology: The topology (its file's directory is the subprocess cwd).
        serializer: Multilang serializer.
        bin_dir: Directory of ``streamparse_run``.
        pid_dir: Directory given as ``pidDir`` in the handshake.
        env: Subprocess environment.
        sink: Where the pipe readers post events (thread-safe).
        clock: Monotonic clock in seconds.
        forks: The fork server Python tasks are forked from (None: exec each).
    """

    topology: LoadedTopology
    serializer: Serializer
    bin_dir: Path
    pid_dir: Path
    env: Mapping[str, str]
    sink: Callable[[ProcessEvent], None]
    clock: Callable[[], float]
    forks: ForkServer | None = None

    def process(self, rt: TaskRuntime, incarnation: int | None = None) -> TaskProcess:
        """Return an unstarted subprocess for the task's next incarnation.

        Args:
            rt: The task.
            incarnation: Tag of its events (default: the task's incarnation; a
                straggler's duplicate gets a negative one of its own).
        """
        argv = component_argv(
            rt.component, serializer=self.serializer.name, bin_dir=self.bin_dir
        )
        return TaskProcess(
            argv=argv,
            cwd=str(self.topology.path.parent),
            env=self.env,
            serializer=self.serializer,
            component=rt.component.name,
            task_id=rt.task_id,
            incarnation=rt.incarnation if incarnation is None else incarnation,
            sink=self.sink,
            clock=self.clock,
            forks=self.forks,
        )
