"""Entry point of the ``sr3`` command: argument parsing and dispatch only."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from sr3.errors import SR3Error
from sr3_cli.args import chaos, compare, lab, rebalance, ring, run, savepoint
from sr3_cli.args.common import Handler
from sr3_cli.logs import configure
from sr3_cli.output import emit_error

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

#: Exit codes: 0 success, 1 a check failed (``--verify``, a run not idle) or an
#: internal error, 2 bad input or an unreachable ring (the message says which).
EXIT_USAGE = 2
EXIT_INTERNAL = 1
#: Ctrl-C (SIGINT), as a shell reports a command it interrupted: 128 + 2.
EXIT_INTERRUPTED = 130
#: SIGTERM (``kill``, ``timeout``, a cancelled CI job): 128 + 15.
EXIT_TERMINATED = 143
#: The signals a command stops on, cleaning up (see :func:`_on_signal`).
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
E_INTERRUPTED = "interrupted ({how}){hint}"
#: What an interrupted command left behind, by its first word(s).
_INTERRUPTED_HINTS = {
    "snapshot put": (
        "; an epoch commits at its end in one ZooKeeper transaction, so the one "
        "being written is committed whole or not at all (`sr3 snapshot get` "
        "shows the latest): run it again"
    ),
    "lab": "; the lab may be partly started or stopped: run the command again",
    "run": (
        "; epochs committed before stay committed: `sr3 run --resume` goes on "
        "from the last one"
    ),
}
E_INTERNAL = (
    "internal error: {kind}: {exc} (rerun with --log-level DEBUG for the "
    "traceback, and report it)"
)


class TerminatedError(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C is.

    Without it the interpreter dies at once and a command's ``finally`` blocks
    never run: ``sr3 run`` without a lab would leave its embedded ZooKeeper and
    ring nodes running (they are in sessions of their own) and its temp dir.
    """


#: How long a signal waits for the main thread to leave third-party code, per
#: try, and in all (then it interrupts wherever it is).
_DEFER_S = 0.01
_DEFER_MAX_S = 2.0
_deferred = {"since": 0.0}


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Raise SIGTERM's or SIGINT's exception, outside third-party code.

    An exception raised in the middle of third-party code may never reach the
    command: kazoo's ``KazooClient._call`` wraps its socket send in a bare
    ``except:`` and turns whatever comes into ``ConnectionClosedError``. A
    SIGTERM that landed there (seen in CI) made ``sr3 run`` fail with "this
    process closed its ZooKeeper session" instead of stopping, or went on
    running to the end of its ``--duration``. So while the main thread is in
    a package's code the signal is sent again 10 ms later, for 2 s at most.
    """
    now = time.monotonic()
    if _in_packages(frame):
        since = _deferred["since"] or now
        if now - since < _DEFER_MAX_S:
            _deferred["since"] = since
            timer = threading.Timer(_DEFER_S, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return
    _deferred["since"] = 0.0
    if signum == signal.SIGTERM:
        raise TerminatedError
    raise KeyboardInterrupt


def _in_packages(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller runs code of an installed package."""
    while frame is not None:
        parts = Path(frame.f_code.co_filename).parts
        if "site-packages" in parts or "dist-packages" in parts:
            return True
        frame = frame.f_back
    return False


class UsageError(Exception):
    """A command line argparse refused (raised instead of exiting)."""

    def __init__(self, usage: str, message: str) -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise, so ``main`` decides the output."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.format_usage(), f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    """Return the ``sr3`` argument parser.

    The sub-commands' options come from :mod:`sr3_cli.args` (argparse only);
    each handler's module is imported when its sub-command runs.
    """
    parser = _Parser(
        prog="sr3", description="SR3 for Python: replicated state ring and recovery"
    )
    parser.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="show log records of this level and up as they happen (default: "
        "warnings are shown once the command ends, and only when it did not fail; "
        "`sr3 node` and `sr3 run` log WARNING and up live)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show log records as they happen (as --log-level INFO)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    lab.add_parsers(sub)
    ring.add_parsers(sub)
    run.add_parsers(sub)
    savepoint.add_parsers(sub)
    rebalance.add_parsers(sub)
    chaos.add_parsers(sub)
    compare.add_parsers(sub)
    ring.add_demo_parser(sub)
    return parser


def _want_json(argv: Sequence[str]) -> bool:
    return "--json" in argv


def _fail(message: str, *, as_json: bool, kind: str, code: int) -> int:
    """Report a failure on stderr (and as JSON on stdout with ``--json``)."""
    print(f"sr3: error: {message}", file=sys.stderr)
    if as_json:
        emit_error(kind, message, code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sr3`` command; return its exit code.

    A failure never ends in a traceback: bad input, a missing lab or an
    unreachable ring print ``sr3: error: ...`` on stderr and return 2; with
    ``--json``, stdout also gets ``{"error": {"type", "message", "exit_code"}}``.
    Ctrl-C, whenever it comes (even while the command's modules load), prints
    one line and returns 130; SIGTERM the same with 143, after the command's
    clean-up ran.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    # only the main thread may set a handler (main() called from a thread: not)
    previous = (
        {
            sig: signal.signal(sig, _on_signal)
            for sig in _SIGNALS
            # a SIGINT ignored (a background job of a script) stays ignored
            if sig != signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN
        }
        if in_main_thread
        else {}
    )
    try:
        return _run(words)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, TerminatedError)
        how = "SIGTERM" if terminated else "Ctrl-C"
        return _fail(
            E_INTERRUPTED.format(how=how, hint=_interrupted_hint(words)),
            as_json=_want_json(words),
            kind=type(exc).__name__,
            code=EXIT_TERMINATED if terminated else EXIT_INTERRUPTED,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted_hint(words: list[str]) -> str:
    """Say what an interrupted command left behind (its words may not parse)."""
    plain = [
        w
        for i, w in enumerate(words)
        if not w.startswith("-") and (i == 0 or words[i - 1] != "--log-level")
    ]
    for n in (2, 1):
        hint = _INTERRUPTED_HINTS.get(" ".join(plain[:n]))
        if hint is not None:
            return hint
    return ""


def _run(words: list[str]) -> int:
    as_json = _want_json(words)
    parser = build_parser()
    try:
        args = parser.parse_args(savepoint.shorthand(words))
    except UsageError as exc:
        sys.stderr.write(exc.usage)
        print(exc, file=sys.stderr)
        if as_json:
            emit_error("UsageError", str(exc), EXIT_USAGE)
        return EXIT_USAGE
    held = configure(args.command, log_level=args.log_level, verbose=args.verbose)
    failed = True  # also when interrupted: the interruption line says it
    try:
        code, failed = _dispatch(args)
        return code
    finally:
        if held is not None:
            # the `sr3: error:` line says why; warnings on the way are that failure
            held.finish(show=not failed)
            logging.getLogger().removeHandler(held)


def _dispatch(args: argparse.Namespace) -> tuple[int, bool]:
    """Run the command's handler; return its exit code and whether it errored."""
    handler: Handler = args.handler
    as_json = bool(getattr(args, "json", False))
    try:
        return handler(args), False
    except SR3Error as exc:
        kind = type(exc).__name__
        return _fail(str(exc), as_json=as_json, kind=kind, code=EXIT_USAGE), True
    except BrokenPipeError:  # stdout closed early (`| head`): nothing to say
        # kept open to the end: the interpreter flushes stdout at exit
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        return EXIT_INTERNAL, True
    except OSError as exc:  # a path or socket of the command line: it names it
        kind = type(exc).__name__
        return _fail(str(exc), as_json=as_json, kind=kind, code=EXIT_USAGE), True
    except Exception as exc:
        logger.debug("sr3 %s failed", args.command, exc_info=True)
        kind = type(exc).__name__
        message = E_INTERNAL.format(kind=kind, exc=exc)
        return _fail(message, as_json=as_json, kind=kind, code=EXIT_INTERNAL), True
