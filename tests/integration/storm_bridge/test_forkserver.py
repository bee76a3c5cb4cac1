"""Tasks forked from the local cluster's fork server behave as exec'd ones.

A real server process (``python -m storm_bridge.cluster.zygote``) forks real
``streamparse_run`` tasks: each gets its own pid and session, the cwd,
environment and argv asked for, working pipes, and an exit status as
``subprocess.Popen`` reports it (minus the signal when killed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from storm_bridge.cluster.forkserver import ForkServer, ForkServerDown
from storm_bridge.cluster.process import ProcessEvent, TaskProcess
from storm_bridge.multilang import get_serializer

BIN = Path(sys.executable).parent
RUN = str(BIN / "streamparse_run")

#: A component class streamparse_run can start: it reports where and who it
#: is, echoes one stdin line, then exits with the status that line names.
PROBE = textwrap.dedent(
    """
    import json, os, sys

    class Probe:
        def __init__(self, serializer):
            self.serializer = serializer

        def run(self):
            print(json.dumps({
                "pid": os.getpid(),
                "sid": os.getsid(0),
                "cwd": os.getcwd(),
                "env": os.environ.get("PROBE_ENV"),
                "argv": sys.argv,
                "path0": sys.path[0],
                "cmdline": open("/proc/self/cmdline", "rb").read().decode(),
                "comm": open("/proc/self/comm").read().strip(),
                "serializer": self.serializer,
            }), flush=True)
            line = sys.stdin.readline().strip()
            if line == "raise":
                raise RuntimeError("probe failed on purpose")
            if line == "hang":
                sys.stdin.read()
            sys.exit(int(line or 0))
    """
)


@pytest.fixture
def topology_dir(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


@pytest.fixture
def server(topology_dir: Path) -> Iterator[ForkServer]:
    forks = ForkServer(BIN, str(topology_dir), {**os.environ, "PROBE_ENV": "base"})
    yield forks
    forks.close()


def _hello(child_stdout: IO[bytes]) -> dict[str, object]:
    line = child_stdout.readline()
    return dict(json.loads(line))


def test_a_forked_task_has_its_own_pid_session_cwd_env_and_argv(
    server: ForkServer, topology_dir: Path
) -> None:
    child = server.spawn(
        [RUN, "-s msgpack probe.Probe"],
        str(topology_dir),
        {**os.environ, "PROBE_ENV": "task"},
    )
    hello = _hello(child.stdout)
    assert hello["pid"] == child.pid
    assert hello["sid"] == child.pid  # a session leader, like start_new_session
    assert hello["cwd"] == str(topology_dir)
    assert hello["env"] == "task"
    assert hello["argv"] == [RUN, "-s", "msgpack", "probe.Probe"]
    assert hello["path0"] == str(BIN)
    # what ps shows, as for the executed script
    shown = f"{sys.executable} {RUN} -s msgpack probe.Probe"
    assert str(hello["cmdline"]).rstrip("\0") == shown
    assert hello["comm"] == "streamparse_run"
    assert hello["serializer"] == "msgpack"
    child.stdin.write(b"7\n")
    child.stdin.flush()
    assert child.wait(timeout=30) == 7
    assert child.poll() == 7


def test_a_killed_task_reports_minus_sigkill_and_an_error_reports_1(
    server: ForkServer, topology_dir: Path
) -> None:
    killed = server.spawn([RUN, "probe.Probe"], str(topology_dir), dict(os.environ))
    _hello(killed.stdout)
    assert killed.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        killed.wait(timeout=0.2)
    killed.kill()
    assert killed.wait(timeout=30) == -signal.SIGKILL

    failing = server.spawn([RUN, "probe.Probe"], str(topology_dir), dict(os.environ))
    _hello(failing.stdout)
    failing.stdin.write(b"raise\n")
    failing.stdin.flush()
    assert failing.wait(timeout=30) == 1
    assert "RuntimeError: probe failed on purpose" in failing.stderr.read().decode()


def test_only_the_servers_own_streamparse_run_is_forked(server: ForkServer) -> None:
    assert server.serves([RUN, "probe.Probe"])
    assert not server.serves(["/usr/bin/env", "python3", "probe.py"])
    assert not server.serves(["/elsewhere/bin/streamparse_run", "probe.Probe"])


def test_tasks_outlive_a_closed_server_and_later_starts_are_executed(
    server: ForkServer, topology_dir: Path
) -> None:
    child = server.spawn([RUN, "probe.Probe"], str(topology_dir), dict(os.environ))
    _hello(child.stdout)
    server.close()
    with pytest.raises(ForkServerDown):
        server.spawn([RUN, "probe.Probe"], str(topology_dir), dict(os.environ))
    assert child.poll() is None  # still running, as an exec'd task would be
    child.stdin.write(b"0\n")
    child.stdin.flush()
    child.wait(timeout=30)  # init reaped it: the status is gone, the end is not

    events: list[ProcessEvent] = []
    task = TaskProcess(
        argv=[RUN, "probe.Probe"],
        cwd=str(topology_dir),
        env=dict(os.environ),
        serializer=get_serializer("json"),
        component="probe",
        task_id=1,
        incarnation=1,
        sink=events.append,
        forks=server,
    )
    task.start()  # the server is gone: Popen runs it
    assert task.pid is not None
    assert task.kill() == -signal.SIGKILL
