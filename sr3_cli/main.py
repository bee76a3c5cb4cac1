"""Entry point of the ``sr3`` command: argument parsing and dispatch only."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from sr3.errors import SR3Error
from sr3.ring import MAX_CAPACITY
from sr3_cli.argtypes import at_least, fraction, int_between, nonempty, tcp_port
from sr3_cli.logs import configure
from sr3_cli.output import JSON_HELP, emit_error

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace], int]

#: Most ring nodes ``sr3 lab up`` starts: all run on this machine.
MAX_LAB_NODES = 100
#: Exit codes: 0 success, 1 a check failed (``--verify``, a run not idle) or an
#: internal error, 2 bad input or an unreachable ring (the message says which).
EXIT_USAGE = 2
EXIT_INTERNAL = 1
#: Ctrl-C (SIGINT), as a shell reports a command it interrupted: 128 + 2.
EXIT_INTERRUPTED = 130
#: SIGTERM (``kill``, ``timeout``, a cancelled CI job): 128 + 15.
EXIT_TERMINATED = 143
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


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise TerminatedError


class UsageError(Exception):
    """A command line argparse refused (raised instead of exiting)."""

    def __init__(self, usage: str, message: str) -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise, so ``main`` decides the output."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.format_usage(), f"{self.prog}: error: {message}")


def _lab_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        dest="lab_dir",
        default=None,
        help="lab dir (default: $SR3_LAB or ./lab)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the ``sr3`` argument parser."""
    from sr3_cli import (  # noqa: PLC0415 - keeps --help fast
        chaos_cmd,
        commands,
        compare,
        lab_kafka,
        rebalance_cmd,
        savepoint_cmd,
        topology_cmd,
    )

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

    lab = sub.add_parser(
        "lab", help="a local ZooKeeper plus ring nodes"
    ).add_subparsers(dest="lab_command", required=True)
    up = lab.add_parser("up", help="start ZooKeeper and N ring nodes in the background")
    _lab_dir_arg(up)
    up.add_argument(
        "--nodes",
        # every node is a process of about 40 MB on this machine
        type=int_between(1, MAX_LAB_NODES),
        default=None,
        help=f"ring nodes, 1..{MAX_LAB_NODES} (default 5 for a new lab; an "
        "existing one keeps its own)",
    )
    up.add_argument(
        "--zones", default="", help="comma-separated zone labels, round robin"
    )
    up.add_argument(
        "--spark",
        action="store_true",
        help="also start a Spark standalone master and worker (URL in lab.json)",
    )
    up.add_argument(
        "--spark-cores", type=at_least(1), default=2, help="worker cores (2)"
    )
    up.add_argument("--spark-memory", default="2g", help="worker memory (2g)")
    up.add_argument(
        "--storm",
        action="store_true",
        help="also start a real Apache Storm cluster (Nimbus, supervisors) from "
        "the fetched jars; its storm.yaml is LAB/storm/conf/storm.yaml",
    )
    up.add_argument(
        "--supervisors",
        type=int_between(1, 8),
        default=1,
        help="Storm supervisors, 1..8 (1)",
    )
    up.add_argument(
        "--storm-slots",
        type=int_between(1, 8),
        default=2,
        help="worker slots per supervisor, 1..8 (2)",
    )
    up.add_argument(
        "--nimbus-port",
        type=tcp_port,
        default=None,
        help="Nimbus's Thrift port (default 6627 when free, else any free one; "
        "0: any free one)",
    )
    up.add_argument(
        "--kafka",
        action="store_true",
        help="also start an Apache Kafka broker (KRaft) from the fetched jars; "
        "its bootstrap address is in lab.json and `sr3 status --json`",
    )
    up.add_argument(
        "--kafka-brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="Kafka brokers: 1, or 3 combined KRaft nodes with topics "
        "replicated 3 times, 2 in sync (1; 3 implies --kafka)",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="also start a Prometheus server (Debian's package) scraping every "
        "ring node and `sr3 run`; its URL is in `sr3 status --json`",
    )
    from sr3_cli import lab_metrics, lab_netns_cmd  # noqa: PLC0415 - keeps --help fast

    lab_netns_cmd.add_up_args(up)
    up.set_defaults(handler=lab_metrics.lab_up)
    down = lab.add_parser(
        "down", help="stop the lab's Storm, Spark, Kafka, nodes and ZooKeeper"
    )
    _lab_dir_arg(down)
    down.add_argument("--purge", action="store_true", help="also delete the lab dir")
    down.set_defaults(handler=commands.lab_down)
    kill = lab.add_parser("kill", help="SIGKILL ring nodes (ids as `sr3 status` shows)")
    _lab_dir_arg(kill)
    kill.add_argument("node_ids", nargs="+", metavar="NODE_ID")
    kill.set_defaults(handler=commands.lab_kill)
    restart = lab.add_parser(
        "restart", help="start stopped nodes again on their data dirs"
    )
    _lab_dir_arg(restart)
    restart.add_argument("node_ids", nargs="+", metavar="NODE_ID")
    restart.set_defaults(handler=commands.lab_restart)
    topic = lab.add_parser(
        "topic", help="create a topic on the lab's Kafka broker (lab up --kafka)"
    )
    _lab_dir_arg(topic)
    topic.add_argument("name", help="the topic's name")
    topic.add_argument(
        "--partitions", type=int_between(1, 1000), default=2, help="partitions (2)"
    )
    topic.set_defaults(handler=lab_kafka.create_topic)
    lab_netns_cmd.add_parsers(lab, _lab_dir_arg)

    node = sub.add_parser("node", help="run one ring node in the foreground")
    node.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT[,HOST:PORT]")
    node.add_argument(
        "--chroot", default=None, help="cluster root znode (/sr3/default)"
    )
    node.add_argument(
        "--host", default="127.0.0.1", help="address to bind and announce"
    )
    node.add_argument(
        "--port", type=tcp_port, default=0, help="TCP port (0 = any free port)"
    )
    node.add_argument("--data-dir", required=True, type=Path)
    node.add_argument("--zone", default=None, help="failure zone label")
    node.add_argument(
        "--node-id",
        type=nonempty,
        default=None,
        help="id on first start (kept in data dir)",
    )
    node.add_argument(
        "--capacity",
        # each unit is sr3.ring.vnodes (2048) ring points that every client and
        # node hashes and sorts on each membership change
        type=int_between(1, MAX_CAPACITY),
        default=1,
        help=f"relative ring weight, 1..{MAX_CAPACITY} (default 1)",
    )
    node.add_argument("--secret-file", default=None, help="shared ring secret")
    node.set_defaults(handler=commands.node)

    status = sub.add_parser(
        "status", help="members, shards per node, replication health"
    )
    commands.add_cluster_args(status)
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(handler=commands.status)

    snap = sub.add_parser("snapshot", help="synthetic keyed snapshots").add_subparsers(
        dest="snapshot_command", required=True
    )
    put = snap.add_parser("put", help="write a synthetic snapshot through the ring")
    commands.add_cluster_args(put)
    put.add_argument("--owner", required=True, type=nonempty)
    put.add_argument("--size", required=True, help="total bytes, as 200MB or 1GiB")
    put.add_argument(
        "--keys", type=at_least(1), default=None, help="key count (default size/1KiB)"
    )
    put.add_argument(
        "--seed",
        # stored in the manifest, whose msgpack ints are 64-bit
        type=int_between(-(2**63), 2**64 - 1),
        default=0,
        help="seed of the values (default 0)",
    )
    put.add_argument(
        "--epochs", type=at_least(1), default=1, help="1 full epoch + deltas"
    )
    put.add_argument("--update-fraction", type=fraction, default=0.1)
    put.add_argument(
        "--max-chain-length",
        type=at_least(1),
        default=None,
        help="deltas before a full epoch (default sr3.checkpoint.max.chain.length)",
    )
    put.add_argument("--json", action="store_true", help=JSON_HELP)
    put.set_defaults(handler=commands.snapshot_put)
    get = snap.add_parser(
        "get", help="recover a snapshot from the ring by star, line or tree"
    )
    commands.add_cluster_args(get)
    get.add_argument("--owner", required=True, type=nonempty)
    get.add_argument(
        "--epoch", type=at_least(1), default=None, help="default: latest committed"
    )
    get.add_argument(
        "--mechanism",
        choices=("star", "line", "tree", "auto"),
        default="auto",
        help="recovery structure (default auto: the planner chooses)",
    )
    get.add_argument(
        "--eager",
        action="store_true",
        help="decode every key group at install (default: lazy, on first touch)",
    )
    get.add_argument(
        "--verify", action="store_true", help="check every key; exit 1 on mismatch"
    )
    get.add_argument("--json", action="store_true", help=JSON_HELP)
    get.set_defaults(handler=commands.snapshot_get)

    topology_cmd.add_parsers(sub)
    savepoint_cmd.add_parsers(sub)
    rebalance_cmd.add_parsers(sub)
    chaos_cmd.add_parsers(sub)
    compare.add_parsers(sub)

    demo = sub.add_parser("demo", help="the main job on embedded defaults")
    demo.add_argument(
        "--dir",
        dest="lab_dir",
        default=None,
        help="scratch lab dir, wiped first: new, empty or an earlier demo's "
        "(default $TMPDIR/sr3-demo; $SR3_LAB is never used)",
    )
    demo.add_argument("--size", default="200MB", help="snapshot size (default 200MB)")
    demo.set_defaults(handler=commands.demo)
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
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
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
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


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
        args = parser.parse_args(words)
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
