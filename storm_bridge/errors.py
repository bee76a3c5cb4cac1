"""Errors raised by the Storm bridge: multilang, local cluster, checkpoints.

All derive from :class:`StormBridgeError`, itself an :class:`sr3.errors.SR3Error`.
Errors about a running task carry ``component`` and ``task_id`` so that operators
can find the subprocess (and its log lines) that misbehaved.
"""

from __future__ import annotations

from sr3.errors import SR3Error

__all__ = [
    "E_STDOUT",
    "CheckpointError",
    "ClusterStateError",
    "MultilangProtocolError",
    "StormBridgeError",
    "SubprocessTimeoutError",
    "TaskExitedError",
]

#: Why a task's stdout holds something that is not a message, and the fix.
E_STDOUT = (
    "a component's stdout is the multilang channel, so a print() or a library "
    "writing to stdout breaks the protocol and kills the task, as on Storm; "
    "log with self.logger or self.log, or print to sys.stderr"
)


class StormBridgeError(SR3Error):
    """Root of the errors raised by ``storm_bridge``."""


class ClusterStateError(StormBridgeError, RuntimeError):
    """The local cluster was asked for a move its lifecycle does not allow."""


class CheckpointError(StormBridgeError):
    """An epoch could not be committed or recorded; a later epoch is tried."""

    retriable = True


class _TaskErrorMixin(Exception):
    """Names the task (one subprocess) of a running topology an error is about.

    Attributes:
        component: The component id of the task.
        task_id: The Storm task id.
        detail: What went wrong, without the component/task prefix.
    """

    def __init__(self, component: str, task_id: int, detail: str) -> None:
        self.component = component
        self.task_id = task_id
        self.detail = detail
        super().__init__(f"component {component!r} task {task_id}: {detail}")


class MultilangProtocolError(_TaskErrorMixin, StormBridgeError):
    """A subprocess broke the multilang protocol.

    Garbage on stdout, a frame that is not a JSON/msgpack map, an unknown command,
    an ack, fail or anchor naming a tuple id that is not pending: Storm's ShellBolt
    and ShellSpout kill the worker for these; the local cluster restarts the task.
    """


class SubprocessTimeoutError(_TaskErrorMixin, StormBridgeError):
    """A subprocess stayed silent longer than ``topology.subprocess.timeout.secs``."""

    retriable = True


class TaskExitedError(_TaskErrorMixin, StormBridgeError):
    """A subprocess exited (crash, ``SIGKILL``, uncaught exception in a component)."""

    retriable = True
