"""``sr3 chaos``: a seeded randomized failure campaign against failure-free runs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.argtypes import at_least, positive_seconds
from sr3_cli.chaos import (
    SPARK,
    Outcome,
    generate,
    recovery_times,
    replay_command,
    summarize_recoveries,
)
from sr3_cli.chaos_netns import E_NOT_NETNS, require_netns
from sr3_cli.chaos_runs import final_state, run_schedule
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.output import JSON_HELP, emit_json, table
from sr3_cli.run_checks import check_topology_file, parse_conf
from sr3_cli.topology_cmd import embedded_lab
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

__all__ = ["add_parsers"]

DEFAULT_TOPOLOGY = Path("topologies") / "wordcount.py"
#: Conf of the default topology: small enough for a schedule every ~10 s.
DEFAULT_CONF = {"wordcount.lines": 600, "sr3.checkpoint.interval.s": 0.3}
CAMPAIGN_NODES = 4


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 chaos`` to the ``sr3`` parser."""
    p = sub.add_parser(
        "chaos",
        help="randomized failure campaign: seeded schedules checked against a "
        "failure-free run",
    )
    p.add_argument(
        "--topology",
        default=str(DEFAULT_TOPOLOGY),
        help=f"topology file ({DEFAULT_TOPOLOGY}, with a small corpus)",
    )
    p.add_argument("--schedules", type=at_least(1), default=10, help="how many (10)")
    p.add_argument("--seed", type=int, default=1, help="campaign seed (1)")
    p.add_argument(
        "--only",
        type=at_least(0),
        default=None,
        metavar="INDEX",
        help="run only schedule INDEX of the seed (replays a failure)",
    )
    p.add_argument(
        "--engine",
        choices=["storm", "spark", "both"],
        default="storm",
        help="engines drawn: the Storm engine's local cluster in the --mode "
        "checkpoint modes, Spark (local[2]; no task kills), or both (storm)",
    )
    p.add_argument(
        "--mode",
        choices=["local", "native", "both"],
        default="both",
        help="checkpoint modes drawn (both)",
    )
    p.add_argument(
        "-o",
        dest="conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Storm conf of every run (repeatable)",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=120.0,
        help="bound of each run (120 s)",
    )
    p.add_argument("--lab", default=None, help="a running lab (default: a new one)")
    p.add_argument(
        "--netns-faults",
        action="store_true",
        help="also draw partition-node (a ring node's host cut off) and netem-slow "
        "(every link slowed) faults; needs --lab of a `sr3 lab up --netns` lab",
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(handler=chaos)


@contextmanager
def _lab(args: argparse.Namespace) -> Iterator[Lab]:
    root = resolve_lab_dir(args.lab)
    if root is not None:
        lab = Lab.load(root)
        if not lab.zookeeper_running:
            msg = f"the lab at {root} is stopped; `sr3 lab up --dir {root}` first"
            raise ConfigError(msg)
        yield lab
        return
    with embedded_lab(CAMPAIGN_NODES) as lab:
        yield lab


def chaos(args: argparse.Namespace) -> int:
    """Run the campaign; print a table (or JSON); 1 when a schedule failed."""
    path = Path(args.topology)
    check_topology_file(str(path))
    conf = {**(DEFAULT_CONF if args.topology == str(DEFAULT_TOPOLOGY) else {})}
    conf.update(parse_conf(args.conf))
    modes: tuple[str, ...] = ()
    if args.engine in ("storm", "both"):
        modes = ("local", "native") if args.mode == "both" else (args.mode,)
    if args.engine in ("spark", "both"):
        modes += (SPARK,)
    draws = [f"--engine={args.engine}"] if args.engine != "storm" else []
    draws += [f"--mode={args.mode}"] if args.mode != "both" else []
    draws += ["--netns-faults"] if args.netns_faults else []
    topology = load_topology(path)
    if args.only is not None and args.only >= args.schedules:
        msg = f"--only {args.only}: the campaign has schedules 0..{args.schedules - 1}"
        raise ConfigError(msg)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    if args.netns_faults and resolve_lab_dir(args.lab) is None:
        raise ConfigError(E_NOT_NETNS)
    with _lab(args) as lab:
        if args.netns_faults:
            require_netns(lab)
        schedules = generate(
            args.seed,
            args.schedules,
            topology=topology,
            nodes=sorted(lab.nodes),
            modes=modes,
            netns=args.netns_faults,
        )
        if args.only is not None:
            schedules = [schedules[args.only]]
        ring = RingAccess(lab.config(Sr3Config.from_env()))
        try:
            clean = run_topology(
                path,
                ring=ring,
                options=RunOptions(until_idle=True, conf=conf, timeout_s=args.timeout),
            )
            if not clean.idle or clean.task_failures:
                errors = "; ".join(clean.errors[:3])
                msg = (
                    f"the failure-free run of {path} did not end cleanly "
                    f"({clean.busy or 'tasks failed'}): {errors}; fix the topology "
                    "or its -o conf before a campaign"
                )
                raise ConfigError(msg)
            expected = final_state(ring, topology)
        finally:
            ring.close()
        for schedule in schedules:
            outcome = run_schedule(
                lab,
                path,
                schedule,
                conf=conf,
                expected=expected,
                expected_outputs=clean.outputs,
                timeout_s=args.timeout,
            )
            outcomes.append(outcome)
            if not args.json:
                verdict = "pass" if outcome.passed else "FAIL"
                print(
                    f"[{len(outcomes)}/{len(schedules)}] {verdict} "
                    f"{outcome.seconds:.1f}s {schedule.describe()}",
                    file=sys.stderr,
                    flush=True,
                )
    failed = [o for o in outcomes if not o.passed]
    seconds = time.monotonic() - started
    times = recovery_times(outcomes)
    recoveries = summarize_recoveries(times)
    per_hour = round(len(outcomes) * 3600 / seconds, 1) if seconds > 0 else None
    if args.json:
        emit_json(
            {
                "seed": args.seed,
                "topology": str(path),
                "schedules": len(outcomes),
                "passed": len(outcomes) - len(failed),
                "seconds": round(seconds, 3),
                "schedules_per_hour": per_hour,
                "recovery": recoveries,
                "recovery_times": {
                    k: [round(v, 4) for v in t] for k, t in times.items()
                },
                "runs": [
                    {
                        "index": o.schedule.index,
                        "mode": o.schedule.mode,
                        "faults": [f.describe() for f in o.schedule.faults],
                        "passed": o.passed,
                        "seconds": round(o.seconds, 3),
                        "reason": o.reason,
                        "replay": replay_command(o.schedule, path, conf, draws),
                    }
                    for o in outcomes
                ],
            }
        )
        return 1 if failed else 0
    rows = [
        [o.schedule.index, o.schedule.mode, "pass" if o.passed else "FAIL",
         f"{o.seconds:.1f}", o.schedule.describe().split(": ", 1)[1]]
        for o in outcomes
    ]  # fmt: skip
    print(table(["#", "mode", "result", "s", "faults"], rows))
    if recoveries:
        print()
        print("recovery time, failure to the first commit after it:")
        print(
            table(
                ["failure", "recoveries", "p50 s", "p99 s", "max s"],
                [
                    [kind, r["count"], r["p50_s"], r["p99_s"], r["max_s"]]
                    for kind, r in recoveries.items()
                ],
            )
        )
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} schedules passed "
        f"(seed {args.seed}, {seconds:.0f} s, {per_hour} schedules per hour)"
    )
    for outcome in failed:
        print(f"schedule {outcome.schedule.index}: {outcome.reason}")
        print(f"  replay: {replay_command(outcome.schedule, path, conf, draws)}")
    return 1 if failed else 0
