"""The fork server's own process: import once, fork a task per request.

``python -m storm_bridge.cluster.zygote FD`` runs in the local cluster's
virtualenv with the tasks' environment. It imports what every Python task
imports (streamparse, whose ``streamparse.thrift`` parses Storm's IDL at every
import; pystorm; our bolt and spout runtime), says it is ready, and then serves
requests on the ``SOCK_SEQPACKET`` socket ``FD``:

* a request is one JSON packet ``{"argv": [...], "cwd": ..., "env": {...}}``
  carrying three file descriptors (the task's stdin, stdout and stderr). The
  server forks; the child becomes a session leader with those descriptors as
  0, 1 and 2, the request's cwd, environment and ``sys.argv``, and runs
  streamparse's ``streamparse_run`` entry point as the script would. The reply
  is ``{"pid": N}`` (or ``{"error": ...}``). The child's command line (``ps``,
  ``/proc/PID/cmdline``) is the one the exec'd script would have;
* when a child ends, the server reaps it and sends ``{"exit": pid, "code": c}``
  (``c`` as :attr:`subprocess.Popen.returncode` gives it: minus the signal for
  a killed child).

The server exits when the socket closes (the cluster stopped or died); its
children keep running until their stdin closes, as exec'd tasks would.
Nothing here writes to the server's stdout: a child's streams must start empty.
:mod:`storm_bridge.cluster.forkserver` is the cluster's side.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["PRELOAD", "main"]

#: Modules every task (or every stateful task) would import on its own. Loaded
#: by name so the cluster's layer does not import the bolt runtime itself.
PRELOAD: Final = (
    "streamparse",
    "streamparse.run",
    "pystorm",
    "msgpack",
    "storm_bridge",
    "storm_bridge.stateful",
    "storm_bridge.replayable",
    "storm_bridge.bolt_runtime",
    "sr3.client",
    "zk.client",
    "kazoo.client",
    "setproctitle",
)
#: Largest request packet (argv, cwd and the environment as JSON).
MAX_PACKET: Final = 1 << 20


def _preload() -> list[str]:
    """Import :data:`PRELOAD`; return the names that failed (their tasks import)."""
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a task that needs it reports the error itself
            failed.append(name)
    return failed


def _claim_title_space() -> None:
    """Let forked children set their command line (before any env change).

    setproctitle takes the memory of argv and the environment the first time
    it sets a title; a child that has replaced its environment cannot.
    """
    titles = sys.modules.get("setproctitle")
    if titles is not None:
        titles.setproctitle(titles.getproctitle())


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _become_task(
    request: dict[str, Any], fds: Sequence[int], keep_out: Sequence[int]
) -> None:
    """In the forked child: take the request's streams, place and identity."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in keep_out:
        os.close(fd)
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = [str(arg) for arg in request["argv"]]
    sys.argv = argv
    # a script's directory leads sys.path, as when streamparse_run is executed
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    # ps and /proc/PID/cmdline show what an exec'd task would: the interpreter
    # running the script with its arguments
    titles = sys.modules.get("setproctitle")
    if titles is not None:
        titles.setproctitle(" ".join([sys.executable, *argv]))
        titles.setthreadtitle(os.path.basename(argv[0])[:15])  # comm, as exec sets it


def serve(sock: socket.socket) -> dict[str, Any] | None:
    """Serve requests until the socket closes (None) or in a forked child.

    Returns:
        In a child, the request it must run; None in the server once the
        cluster has gone.
    """
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    signal.set_wakeup_fd(wake_w)
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock.fileno() not in ready:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_PACKET, 3)
        except ConnectionResetError:
            data, fds = b"", []
        if not data:
            return None
        try:
            request: dict[str, Any] = json.loads(data)
            if len(fds) != 3:
                msg = f"expected 3 file descriptors, got {len(fds)}"
                raise ValueError(msg)
        except ValueError as exc:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": f"bad fork request: {exc}"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_task(request, fds, keep_out=(sock.fileno(), wake_r, wake_w))
            return request
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})
        _reap(sock)


def main(argv: Sequence[str] | None = None) -> None:
    """Preload, report ready, serve; in a forked child, run the task."""
    args = list(sys.argv[1:] if argv is None else argv)
    sock = socket.socket(fileno=int(args[0]))
    failed = _preload()
    _claim_title_space()
    # the preloaded modules' objects live as long as a task: keep the cyclic
    # collector of every child from walking them (and from copying their pages)
    gc.freeze()
    _send(
        sock,
        {"ready": os.getpid(), "failed": failed, "threads": threading.active_count()},
    )
    if threading.active_count() > 1:
        # forking a process with threads copies their locks mid-use: serve none
        return
    request = serve(sock)
    if request is None:
        return
    sock.detach()
    # preloaded, so no import cost here; the server's layer never imports it
    streamparse_run = importlib.import_module("streamparse.run").main
    sys.exit(streamparse_run())


if __name__ == "__main__":
    main()
