"""Start Python tasks by forking a pre-imported interpreter (the cluster's side).

A task's ``streamparse_run`` spends most of its start-up importing (streamparse
alone takes about 0.25 s of CPU, most of it parsing Storm's Thrift IDL), and the
local cluster starts one per task and per restart. :class:`ForkServer` runs one
:mod:`storm_bridge.cluster.zygote` per cluster that has imported all of that
once, and asks it to fork each task: the child is a real process with its own
pid, session, pipes, cwd and environment, running ``streamparse_run``'s entry
point, so kills, freezes and exit statuses work as they do for an exec'd task.

Only ``streamparse_run`` commands of the interpreter the server runs are forked
(:meth:`ForkServer.serves`); anything else, or any start while the server is
not up, is left to :class:`subprocess.Popen` by :class:`~.process.TaskProcess`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from topology_api.topology import STREAMPARSE_RUN

__all__ = ["ForkServer", "ForkServerDown", "ForkedChild"]

logger = logging.getLogger(__name__)

#: Time the server has to import and report ready before tasks are exec'd.
_READY_TIMEOUT_S: Final = 60.0
#: Time a fork request may take to be answered.
_REPLY_TIMEOUT_S: Final = 30.0
_MAX_PACKET: Final = 1 << 16
#: Poll period for a child's end once the server that reaps it is gone.
_ORPHAN_POLL_S: Final = 0.05


class ForkServerDown(Exception):
    """The fork server is not running (or never started); exec the task instead."""


class ForkedChild:
    """A task process forked by the server, with :class:`subprocess.Popen`'s API.

    Attributes:
        args: The argv it runs.
        pid: Its pid.
        stdin: Pipe to its stdin.
        stdout: Pipe from its stdout.
        stderr: Pipe from its stderr.
    """

    def __init__(
        self,
        server: ForkServer,
        args: Sequence[str],
        pid: int,
        pipes: tuple[IO[bytes], IO[bytes], IO[bytes]],
    ) -> None:
        self._server = server
        self.args = list(args)
        self.pid = pid
        self.stdin, self.stdout, self.stderr = pipes
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit status once it ended, else None."""
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end and return its exit status.

        Raises:
            subprocess.TimeoutExpired: it is still running after ``timeout``.
        """
        if self.returncode is None:
            code = self._server.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.returncode = code
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it, unless it has already been reaped (its pid may be reused)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """One zygote process for one cluster's tasks.

    Args:
        bin_dir: The virtualenv's bin directory (its ``python`` runs the server;
            only its ``streamparse_run`` is forked).
        cwd: The server's working directory.
        env: The server's environment (the tasks').
    """

    def __init__(self, bin_dir: Path, cwd: str, env: Mapping[str, str]) -> None:
        self._bin_dir = bin_dir
        self._cwd = cwd
        self._env = dict(env)
        self._script = str(bin_dir / STREAMPARSE_RUN)
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._exited = threading.Condition()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._ready = threading.Event()
        self._started = False
        self._up = False
        self._closed = False
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the server process (it imports while the caller goes on).

        Idempotent; :meth:`spawn` starts it if nobody did. A server that cannot
        start leaves every task to be executed.
        """
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._sock = ours
            try:
                self._proc = subprocess.Popen(
                    [
                        str(self._bin_dir / "python"),
                        "-m",
                        "storm_bridge.cluster.zygote",
                        str(theirs.fileno()),
                    ],
                    cwd=self._cwd,
                    env=self._env,
                    # pipes, as a task's streams are: Python's stdio objects,
                    # made at the server's start, learn once whether they seek
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            except OSError as exc:
                logger.warning("fork server not started (%s); tasks are exec'd", exc)
                self._ready.set()
                return
            finally:
                theirs.close()
            self._reader = threading.Thread(
                target=self._read, args=(ours,), name="storm-forkserver", daemon=True
            )
            self._reader.start()
            if self._proc.stderr is not None:
                threading.Thread(
                    target=self._drain,
                    args=(self._proc.stderr,),
                    name="storm-forkserver-stderr",
                    daemon=True,
                ).start()

    def serves(self, argv: Sequence[str]) -> bool:
        """Whether ``argv`` is a ``streamparse_run`` this server can fork."""
        return len(argv) >= 1 and argv[0] == self._script

    def spawn(
        self, argv: Sequence[str], cwd: str, env: Mapping[str, str]
    ) -> ForkedChild:
        """Fork a task running ``argv`` with its stdio on new pipes.

        Raises:
            ForkServerDown: the server is not up; exec the task instead.
        """
        self.start()
        sock = self._sock
        if not self._ready.wait(_READY_TIMEOUT_S) or not self._up or sock is None:
            msg = "fork server is not running"
            raise ForkServerDown(msg)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        theirs = (stdin_r, stdout_w, stderr_w)
        ours = (stdin_w, stdout_r, stderr_r)
        request = json.dumps({"argv": list(argv), "cwd": cwd, "env": dict(env)})
        try:
            with self._lock:
                try:
                    socket.send_fds(sock, [request.encode()], list(theirs))
                    reply = self._replies.get(timeout=_REPLY_TIMEOUT_S)
                except (OSError, queue.Empty) as exc:
                    # a late reply would answer the next request: fork no more
                    self._up = False
                    msg = f"fork request failed: {exc!r}; tasks are exec'd from now on"
                    raise ForkServerDown(msg) from exc
        except ForkServerDown:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        if "pid" not in reply:
            for fd in ours:
                os.close(fd)
            raise ForkServerDown(str(reply.get("error", reply)))
        pipes = (
            os.fdopen(stdin_w, "wb"),
            os.fdopen(stdout_r, "rb"),
            os.fdopen(stderr_r, "rb"),
        )
        return ForkedChild(self, argv, int(reply["pid"]), pipes)

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of a forked ``pid``, waiting up to ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._exited:
            while pid not in self._exits:
                if not self._up and not self._alive(pid):
                    # its reaper is gone; init reaped it and its status is lost
                    self._exits[pid] = -signal.SIGKILL
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                wait = _ORPHAN_POLL_S if not self._up else left
                if wait is not None and left is not None:
                    wait = min(wait, left)
                self._exited.wait(wait)
            return self._exits[pid]

    def close(self) -> None:
        """Stop the server (its children run on until their stdin closes)."""
        with self._lock:
            self._closed = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._reader is not None:
            self._reader.join(5.0)
        if self._sock is not None:
            self._sock.close()
        self._ready.set()

    @staticmethod
    def _drain(stderr: IO[bytes]) -> None:
        for raw in stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                logger.warning("fork server stderr: %s", line)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):  # gone, or a reused pid
            return False
        return True

    def _read(self, sock: socket.socket) -> None:
        try:
            while True:
                try:
                    data = sock.recv(_MAX_PACKET)
                except OSError:
                    data = b""
                if not data:
                    return
                message = json.loads(data)
                if "exit" in message:
                    with self._exited:
                        self._exits[int(message["exit"])] = int(message["code"])
                        self._exited.notify_all()
                elif "ready" in message:
                    self._on_ready(message)
                else:
                    self._replies.put(message)
        finally:
            if self._up and not self._closed:
                logger.warning("fork server exited; tasks are exec'd from now on")
            with self._exited:
                self._up = False
                self._exited.notify_all()
            self._ready.set()
            self._replies.put({"error": "fork server exited"})

    def _on_ready(self, message: Mapping[str, Any]) -> None:
        if message.get("failed"):
            logger.debug("fork server could not preload %s", message["failed"])
        if int(message.get("threads", 1)) > 1:
            logger.warning(
                "fork server has %s threads after its imports and serves no "
                "forks; tasks are exec'd",
                message["threads"],
            )
        else:
            self._up = True
        self._ready.set()
