"""A SIGTERM or Ctrl-C reaches the command even when it lands in a package's code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: A command whose main thread is inside a package's bare ``except:`` when the
#: signal comes, as kazoo's ``KazooClient._call`` is around its socket send.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from sr3_cli import main

    PACKAGE = '''
    def call(inner):
        try:
            inner()
        except:  # NOQA - as kazoo's KazooClient._call
            return "swallowed"
        return "done"
    '''
    space = {"__name__": "kazoo.client"}
    exec(compile(PACKAGE, "/venv/lib/site-packages/kazoo/client.py", "exec"), space)
    signal.signal(signal.SIG, main._on_signal)

    def inner():
        os.kill(os.getpid(), signal.SIG)
        for _ in range(20):  # the handler runs in here
            time.sleep(0.001)

    print(space["call"](inner), flush=True)
    try:
        time.sleep(5)  # the command's own code: the signal comes again here
        print("not interrupted", flush=True)
    except KeyboardInterrupt as exc:
        print(type(exc).__name__, flush=True)
    """
)


@pytest.mark.parametrize(
    ("sig", "raised"), [("SIGTERM", "TerminatedError"), ("SIGINT", "KeyboardInterrupt")]
)
def test_a_signal_in_a_packages_bare_except_comes_again_outside_it(
    sig: str, raised: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("signal.SIG", f"signal.{sig}")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["done", raised]
