"""``sr3 chaos``: a seeded randomized failure campaign against failure-free runs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.args.chaos import DEFAULT_TOPOLOGY
from sr3_cli.chaos import (
    APACHE_STORM,
    SPARK,
    SPARK_STANDALONE,
    Outcome,
    Schedule,
    drawn_kinds,
    generate,
    recovery_times,
    replay_command,
    summarize_recoveries,
)
from sr3_cli.chaos_compare import (
    AUTO,
    Comparison,
    Ending,
    choose_comparison,
    reference_runs,
)
from sr3_cli.chaos_netns import E_NOT_NETNS, require_netns
from sr3_cli.chaos_runs import final_state, run_schedule
from sr3_cli.chaos_spark import check_options, spark_runner
from sr3_cli.chaos_storm import StormTarget, run_clean, run_storm_schedule
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.output import emit_json, table
from sr3_cli.run_checks import check_topology_file, parse_conf
from sr3_cli.topology_cmd import embedded_lab
from storm_bridge.report import RunReport
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

__all__ = ["chaos"]

#: Conf of the default topology: small enough for a schedule every ~10 s.
DEFAULT_CONF = {"wordcount.lines": 600, "sr3.checkpoint.interval.s": 0.3}
#: On Apache Storm: a run long enough that kills land while lines still flow.
STORM_DEFAULT_CONF = {"wordcount.lines": 2000, "sr3.checkpoint.interval.s": 0.5}
#: On a Spark standalone cluster: 6 micro-batches of SPARK_ROWS lines.
SPARK_STANDALONE_CONF = {"wordcount.lines": 900}
CAMPAIGN_NODES = 4
E_NO_STORM = (
    "--engine apache-storm needs a Storm cluster: a lab's (`sr3 lab up --storm "
    "--dir DIR`, then --lab DIR) or --nimbus HOST:PORT with --lab DIR of the ring"
)


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


def _modes(args: argparse.Namespace) -> tuple[str, ...]:
    if args.engine == SPARK_STANDALONE:
        check_options(args)
        return (SPARK_STANDALONE,)
    if args.master is not None:
        msg = "--master is for --engine spark-standalone; leave it out"
        raise ConfigError(msg)
    if args.engine == APACHE_STORM:
        if args.nimbus is None and resolve_lab_dir(args.lab) is None:
            raise ConfigError(E_NO_STORM)
        if args.mode == "local":
            msg = (
                "--mode local: --engine apache-storm runs native checkpoints on "
                "the Storm cluster; leave it out"
            )
            raise ConfigError(msg)
        return (APACHE_STORM,)
    if args.nimbus is not None:
        msg = "--nimbus is for --engine apache-storm; leave it out"
        raise ConfigError(msg)
    modes: tuple[str, ...] = ()
    if args.engine in ("storm", "both"):
        modes = ("local", "native") if args.mode == "both" else (args.mode,)
    if args.engine in ("spark", "both"):
        modes += (SPARK,)
    return modes


def _draws(args: argparse.Namespace) -> list[str]:
    """The options a replay needs to draw (and run) the same schedules."""
    draws = [f"--engine={args.engine}"] if args.engine != "storm" else []
    draws += [f"--mode={args.mode}"] if args.mode != "both" else []
    draws += ["--netns-faults"] if args.netns_faults else []
    draws += [f"--kinds={','.join(args.kinds)}"] if args.kinds else []
    draws += [f"--compare={args.compare}"] if args.compare != AUTO else []
    if args.engine in (APACHE_STORM, SPARK_STANDALONE):
        # a replay on a cluster needs the cluster too
        draws += [f"--nimbus={args.nimbus}"] if args.nimbus else []
        draws += [f"--master={args.master}"] if args.master else []
        lab = resolve_lab_dir(args.lab)
        draws += [f"--lab={lab}"] if lab is not None else []
    return draws


Runner = Callable[[Schedule], Outcome]


def _engine_runner(
    args: argparse.Namespace, lab: Lab, path: Path, conf: dict[str, Any]
) -> tuple[Runner, Comparison]:
    """The failure-free run(s) on the local cluster, then a runner of schedules."""
    topology = load_topology(path)
    endings: list[Ending] = []
    for _ in range(reference_runs(args.compare)):
        ring = RingAccess(lab.config(Sr3Config.from_env()))
        try:
            clean = run_topology(
                path,
                ring=ring,
                options=RunOptions(until_idle=True, conf=conf, timeout_s=args.timeout),
            )
            _check_clean(path, clean)
            endings.append((final_state(ring, topology), clean.outputs))
        finally:
            ring.close()
    comparison = choose_comparison(args.compare, path, endings)
    expected, outputs = endings[0]
    runner = partial(
        run_schedule,
        lab,
        path,
        conf=conf,
        expected=expected,
        expected_outputs=outputs,
        timeout_s=args.timeout,
        comparison=comparison,
    )
    return runner, comparison


def _storm_runner(
    args: argparse.Namespace, lab: Lab, path: Path, conf: dict[str, Any]
) -> tuple[Runner, Comparison]:
    """The failure-free run(s) on Apache Storm, then a runner of schedules there."""
    target = _storm_target(args, lab)
    endings: list[Ending] = []
    for _ in range(reference_runs(args.compare)):
        clean, state = run_clean(lab, path, target, conf=conf, timeout_s=args.timeout)
        _check_clean(path, clean)
        endings.append((state, None))
    comparison = choose_comparison(args.compare, path, endings)
    runner = partial(
        run_storm_schedule,
        lab,
        path,
        target=target,
        conf=conf,
        expected=endings[0][0],
        timeout_s=args.timeout,
        comparison=comparison,
    )
    return runner, comparison


def _storm_target(args: argparse.Namespace, lab: Lab) -> StormTarget:
    if args.nimbus is not None:
        return StormTarget(args.nimbus)
    # Storm on demand: only a campaign on it loads streamparse
    from sr3_cli.lab_storm import storm_cluster  # noqa: PLC0415

    cluster = storm_cluster(lab)
    if cluster is None:
        msg = f"the lab at {lab.root} runs no Storm cluster: {E_NO_STORM}"
        raise ConfigError(msg)
    # the lab's workers get the ring secret in their environment
    return StormTarget(cluster.nimbus, supervisors=cluster, secret_in_conf=False)


def _check_clean(path: Path, clean: RunReport) -> None:
    if not clean.idle or clean.task_failures:
        errors = "; ".join(clean.errors[:3])
        msg = (
            f"the failure-free run of {path} did not end cleanly "
            f"({clean.busy or 'tasks failed'}): {errors}; fix the topology "
            "or its -o conf before a campaign"
        )
        raise ConfigError(msg)


def chaos(args: argparse.Namespace) -> int:
    """Run the campaign; print a table (or JSON); 1 when a schedule failed."""
    path = Path(args.topology)
    check_topology_file(str(path))
    conf = {**(DEFAULT_CONF if args.topology == str(DEFAULT_TOPOLOGY) else {})}
    if args.engine == APACHE_STORM and args.topology == str(DEFAULT_TOPOLOGY):
        conf.update(STORM_DEFAULT_CONF)
    if args.engine == SPARK_STANDALONE and args.topology == str(DEFAULT_TOPOLOGY):
        conf.update(SPARK_STANDALONE_CONF)
    conf.update(parse_conf(args.conf))
    modes = _modes(args)
    draws = _draws(args)
    topology = load_topology(path)
    if args.only is not None and args.only >= args.schedules:
        msg = f"--only {args.only}: the campaign has schedules 0..{args.schedules - 1}"
        raise ConfigError(msg)
    for mode in modes:  # a bad --kinds is refused before any run
        drawn_kinds(mode, netns=args.netns_faults, only=args.kinds)
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
            kinds=args.kinds,
        )
        if args.only is not None:
            schedules = [schedules[args.only]]
        runner = {APACHE_STORM: _storm_runner, SPARK_STANDALONE: spark_runner}.get(
            args.engine, _engine_runner
        )
        run_one, comparison = runner(args, lab, path, conf)
        if not args.json:
            print(f"compared: {comparison.note}", file=sys.stderr, flush=True)
        for schedule in schedules:
            outcome = run_one(schedule)
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
                "engine": args.engine,
                "topology": str(path),
                "schedules": len(outcomes),
                "passed": len(outcomes) - len(failed),
                "seconds": round(seconds, 3),
                "schedules_per_hour": per_hour,
                "compare": comparison.name,
                "compare_note": comparison.note,
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
        f"(seed {args.seed}, {seconds:.0f} s, {per_hour} schedules per hour; "
        f"compared {comparison.note})"
    )
    for outcome in failed:
        print(f"schedule {outcome.schedule.index}: {outcome.reason}")
        print(f"  replay: {replay_command(outcome.schedule, path, conf, draws)}")
    return 1 if failed else 0
