"""One task's subprocess: spawn, pipe threads, outbox, kill.

Three threads per subprocess, none of which touches cluster state: a reader that
decodes stdout into messages and hands them to a sink, a writer that drains an
outbox into stdin (so a subprocess that stops reading never blocks the cluster),
and a stderr drain that logs lines and keeps the last ones for error reports, as
Storm's ``ShellProcess.getErrorsString`` does.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, Literal

from storm_bridge.cluster.forkserver import ForkedChild, ForkServer, ForkServerDown
from storm_bridge.errors import MultilangProtocolError
from storm_bridge.multilang import Serializer

__all__ = ["Outbox", "ProcessEvent", "TaskProcess"]

logger = logging.getLogger(__name__)

_STDERR_TAIL_LINES: Final = 50
_WAIT_AFTER_KILL_S: Final = 10.0


@dataclass(frozen=True)
class ProcessEvent:
    """Something a subprocess's reader thread saw.

    Attributes:
        kind: ``message`` (payload = decoded message), ``eof`` (stdout closed) or
            ``error`` (payload = the :class:`MultilangProtocolError`).
        task_id: The task.
        incarnation: Which start of the task (stale events are ignored).
        payload: See ``kind``.
        at: Clock reading when it was read.
    """

    kind: Literal["message", "eof", "error"]
    task_id: int
    incarnation: int
    payload: Any
    at: float


class Outbox:
    """A queue of encoded messages for one subprocess, with an urgent lane.

    Task-id lists and heartbeats go first, like ShellBolt's message queue
    prioritizes task ids; everything else keeps its order.
    """

    def __init__(self) -> None:
        self._items: deque[bytes] = deque()
        self._ready = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, data: bytes, *, urgent: bool = False) -> None:
        """Queue ``data`` (at the front when ``urgent``); dropped once closed."""
        with self._ready:
            if self._closed:
                return
            if urgent:
                self._items.appendleft(data)
            else:
                self._items.append(data)
            self._ready.notify()

    def take_all(self) -> list[bytes] | None:
        """Block until something is queued and return it all; None once closed."""
        with self._ready:
            while not self._items and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            items = list(self._items)
            self._items.clear()
            return items

    def close(self) -> None:
        """Wake the writer for good; pending items are dropped."""
        with self._ready:
            self._closed = True
            self._items.clear()
            self._ready.notify_all()


class TaskProcess:
    """The subprocess of one task incarnation.

    Attributes:
        component: Component id.
        task_id: Task id.
        incarnation: Start number of this task (1 for the first start).
    """

    def __init__(
        self,
        *,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        serializer: Serializer,
        component: str,
        task_id: int,
        incarnation: int,
        sink: Callable[[ProcessEvent], None],
        clock: Callable[[], float] = time.monotonic,
        forks: ForkServer | None = None,
    ) -> None:
        self.component = component
        self.task_id = task_id
        self.incarnation = incarnation
        self._argv = list(argv)
        self._cwd = cwd
        self._env = dict(env)
        self._serializer = serializer
        self._sink = sink
        self._clock = clock
        self._outbox = Outbox()
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._forks = forks
        self._proc: subprocess.Popen[bytes] | ForkedChild | None = None
        self._threads: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        """The subprocess's pid, once started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def outbox_size(self) -> int:
        """Messages queued and not yet written to stdin."""
        return len(self._outbox)

    def start(self) -> None:
        """Spawn the subprocess and its pipe threads.

        A ``streamparse_run`` the fork server serves is forked from it; anything
        else, or anything while the server is down, is executed.

        Raises:
            OSError: the command cannot be executed.
        """
        self._proc = self._forked()
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._argv,
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        stdin, stdout, stderr = self._proc.stdin, self._proc.stdout, self._proc.stderr
        if stdin is None or stdout is None or stderr is None:  # pragma: no cover
            msg = "subprocess pipes were not created"
            raise OSError(msg)
        name = f"storm-{self.component}-{self.task_id}.{self.incarnation}"
        workers: list[tuple[str, Callable[[IO[bytes]], None], IO[bytes]]] = [
            ("reader", self._read, stdout),
            ("writer", self._write, stdin),
            ("stderr", self._drain_stderr, stderr),
        ]
        for role, target, pipe in workers:
            thread = threading.Thread(
                target=target, args=(pipe,), name=f"{name}-{role}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _forked(self) -> ForkedChild | None:
        if self._forks is None or not self._forks.serves(self._argv):
            return None
        try:
            return self._forks.spawn(self._argv, self._cwd, self._env)
        except ForkServerDown as exc:
            logger.debug(
                "component %s task %s: executed, not forked (%s)",
                self.component,
                self.task_id,
                exc,
            )
            return None

    def send(self, message: object, *, urgent: bool = False) -> None:
        """Encode and queue a message for the subprocess."""
        self._outbox.put(self._serializer.encode(message), urgent=urgent)

    def stderr_tail(self) -> str:
        """The last lines the subprocess wrote to stderr."""
        return "\n".join(self._stderr_tail)

    def last_stderr_line(self, wait_s: float) -> str:
        """The last line an exited subprocess wrote to stderr (its exception).

        Waits up to ``wait_s`` for the stderr drain to read what the process
        wrote before it exited.
        """
        for thread in self._threads:
            if thread.name.endswith("-stderr"):
                thread.join(wait_s)
        return self._stderr_tail[-1] if self._stderr_tail else ""

    def kill(self) -> int | None:
        """SIGKILL the subprocess (if alive), reap it and return its exit status."""
        self._outbox.close()
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.kill()
        try:
            return self._proc.wait(timeout=_WAIT_AFTER_KILL_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - kernel did not reap it
            logger.error(
                "component %s task %s: pid %s survived SIGKILL",
                self.component,
                self.task_id,
                self.pid,
            )
            return None

    def reap(self, wait_s: float) -> int | None:
        """Let an exiting subprocess end within ``wait_s``, else kill it.

        Returns:
            Its exit status.
        """
        self._outbox.close()
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def close_stdin(self) -> None:
        """Close stdin once queued messages are dropped (pystorm exits on EOF)."""
        self._outbox.close()

    def join(self, timeout_s: float) -> None:
        """Wait for the pipe threads to finish (after the subprocess is gone)."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _emit(self, kind: Literal["message", "eof", "error"], payload: Any) -> None:
        self._sink(
            ProcessEvent(kind, self.task_id, self.incarnation, payload, self._clock())
        )

    def _read(self, stdout: IO[bytes]) -> None:
        reader = self._serializer.reader(
            stdout, component=self.component, task_id=self.task_id
        )
        while True:
            try:
                message = reader.read()
            except EOFError:
                self._emit("eof", None)
                return
            except MultilangProtocolError as exc:
                self._emit("error", exc)
                return
            except (OSError, ValueError):  # stdout closed under us by a kill
                self._emit("eof", None)
                return
            self._emit("message", message)

    def _write(self, stdin: IO[bytes]) -> None:
        try:
            while True:
                items = self._outbox.take_all()
                if items is None:
                    return
                stdin.write(b"".join(items))
                stdin.flush()
        except (OSError, ValueError):
            # The subprocess is gone; its reader reports the EOF.
            logger.debug(
                "component %s task %s: stdin closed", self.component, self.task_id
            )
        finally:
            try:
                stdin.close()
            except OSError:
                logger.debug(
                    "component %s task %s: stdin close failed",
                    self.component,
                    self.task_id,
                )

    def _drain_stderr(self, stderr: IO[bytes]) -> None:
        for raw in stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._stderr_tail.append(line)
                logger.info(
                    "component %s task %s stderr: %s",
                    self.component,
                    self.task_id,
                    line,
                )
