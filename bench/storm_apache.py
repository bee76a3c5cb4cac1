"""Word count on real Apache Storm versus our local cluster, and a worker kill.

Starts a throw-away lab (ZooKeeper + 3 ring nodes) and an Apache Storm 2.x cluster
from the fetched jars (Nimbus + 1 supervisor, 2 slots; executor stats every
second), then runs ``topologies/wordcount.py`` with every component at
parallelism 1, 2 and 4 on both engines, native checkpoints every second on both
(the protocol real Storm runs), until idle. Prints bolt tuples/s per engine and
their ratio, then the timeline of one worker-JVM SIGKILL on Storm: Storm's part
(kill to the restarted tasks bumping the generation) and ours (restore, replay).
``--only-jit`` compares the workers' JVM flags instead: the lab's quick JIT and
serial collector against the JVM's defaults (tuples/s and the workers' CPU).

    .venv/bin/python bench/storm_apache.py --lines 20000
    .venv/bin/python bench/storm_apache.py --only-field --lines 50000
    .venv/bin/python bench/storm_apache.py --only-jit --lines 50000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lab_session import bench_lab  # noqa: E402 (after sys.path)
from sr3.config import Sr3Config  # noqa: E402 (after sys.path)
from sr3.jvm import LAB_JVM_FLAGS  # noqa: E402 (after sys.path)
from sr3_cli.lab import Lab  # noqa: E402 (after sys.path)
from sr3_cli.output import table  # noqa: E402 (after sys.path)
from storm_bridge.apache import ApacheStormCluster  # noqa: E402 (after sys.path)
from storm_bridge.runner import RunOptions, run_topology  # noqa: E402 (after sys.path)
from storm_bridge.sparse.run import Kill, StormRunOptions, run_on_storm  # noqa: E402 (after sys.path)
from storm_bridge.wiring import RingAccess  # noqa: E402 (after sys.path)

WORDCOUNT = ROOT / "topologies" / "wordcount.py"


def topology_at(par: int, where: Path) -> Path:
    """Write word count with every component at ``par`` tasks; return the file."""
    source = re.sub(r"par=\d+", f"par={par}", WORDCOUNT.read_text())
    path = where / f"wordcount_p{par}.py"
    path.write_text(source)
    return path


def storm_cluster(lab: Lab, root: Path) -> ApacheStormCluster:
    config = lab.config(Sr3Config())
    return ApacheStormCluster(
        root,
        zk_hosts=config.zk.hosts,
        zk_root="/storm-bench",
        supervisors=1,
        slots=2,
        nimbus_port=0,
        conf={
            "sr3.zk.hosts": config.zk.hosts,
            "sr3.zk.chroot": config.zk.chroot,
            "executor.metrics.frequency.secs": 1,
        },
        env={"SR3_NODE_SECRET": config.node.secret},
    )


@contextlib.contextmanager
def ring_and_storm(prefix: str) -> Iterator[tuple[RingAccess, str, Path]]:
    """A throw-away lab (3 ring nodes) and Storm cluster: ring, Nimbus, a temp dir."""
    with bench_lab(3) as lab, tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        ring = RingAccess(lab.config(Sr3Config()))
        cluster = storm_cluster(lab, Path(tmp) / "storm")
        cluster.start()
        try:
            yield ring, cluster.nimbus, Path(tmp)
        finally:
            cluster.stop()
            ring.close()


def overhead(
    ring: RingAccess, cluster: ApacheStormCluster, tmp: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Tuples/s over ``--overhead-s``: checkpoints off (interval 1 h), every 1 s."""
    rows = []
    for label, interval in (("off", 3600.0), ("1 s", 1.0)):
        report = run_on_storm(
            topology_at(2, tmp),
            ring=ring,
            nimbus=cluster.nimbus,
            options=StormRunOptions(
                duration_s=args.overhead_s,
                conf={
                    "wordcount.lines": 300_000,
                    "sr3.checkpoint.interval.s": interval,
                },
            ),
            secret_in_conf=False,
        )
        cp = report["checkpoints"]
        rows.append(
            {
                "checkpoints": label,
                "tuples_per_s": report["throughput"]["tuples_per_s"],
                "epochs": cp["count"],
                "mean_pause_s": cp["mean_duration_s"],
                "max_pause_s": cp["max_duration_s"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


#: ``topology.worker.childopts`` that undoes the lab's flags (appended to
#: ``worker.childopts``): the full tiered JIT and the JVM's default collector.
JVM_DEFAULTS = "-XX:TieredStopAtLevel=4 -XX:-UseSerialGC -XX:+UseG1GC"
_WORKER_MAIN = b"org.apache.storm.daemon.worker.Worker"


class WorkerCpu:
    """CPU seconds of every Storm worker JVM alive while it runs (sampled 4/s).

    And of the processes under those workers (:attr:`component_seconds`): a
    Python topology's multilang tasks. Only CPU spent while it runs counts: a
    process alive at the start (a former topology's, on its way out) counts
    from there. A worker is a process whose command line names Storm's worker
    class: the worker JVM, and the ``LogWriter`` JVM that starts it and pumps
    its output. Each process is counted once, as what it was last seen to be
    (see :func:`classify`).
    """

    def __init__(self) -> None:
        self.ticks: dict[int, int] = {}
        self.child_ticks: dict[int, int] = {}
        self.flags: set[str] = set()
        self._base: dict[int, int] = {}
        self._kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WorkerCpu:
        self._base = {pid: ticks for pid, (_parent, ticks) in _processes()[0].items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return sum(self.ticks.values()) / os.sysconf("SC_CLK_TCK")

    @property
    def component_seconds(self) -> float:
        return sum(self.child_ticks.values()) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            stats, workers = _processes()
            self.record(stats, workers)

    def record(
        self,
        stats: Mapping[int, tuple[int, int]],
        workers: Mapping[int, set[str] | None],
    ) -> None:
        """Take one sample of :func:`_processes` into the totals."""
        self._kinds.update(classify(stats, workers, self._kinds))
        for pid, (_parent, total) in stats.items():
            ticks = total - self._base.get(pid, 0)
            kind = self._kinds.get(pid)
            if kind == WORKER:
                self.ticks[pid] = ticks
                self.child_ticks.pop(pid, None)
            elif kind == CHILD:
                self.child_ticks[pid] = ticks
                self.ticks.pop(pid, None)
        for flags in workers.values():
            self.flags.update(flags or ())


WORKER, CHILD = "worker", "child"


def classify(
    stats: Mapping[int, tuple[int, int]],
    workers: Mapping[int, set[str] | None],
    before: Mapping[int, str],
) -> dict[int, str]:
    """Each process's kind in this sample: ``WORKER``, ``CHILD`` (under one) or none.

    ``workers`` maps a worker to its ``-XX`` flags, and a process whose command
    line read empty (it is exiting, or gone) to None: it keeps the kind it had
    in ``before``. Without that, an exiting worker JVM read as a child of its
    ``LogWriter`` and its whole CPU counted again as its tasks' (one run in
    three or so, 130 µs a tuple more). A process forked by a worker is a copy
    of it until its exec: it is a worker in that sample, a child after.
    """
    kinds: dict[int, str] = {}
    for pid in stats:
        if pid in workers:
            kind = WORKER if workers[pid] is not None else before.get(pid)
            if kind is not None:
                kinds[pid] = kind
    found = {pid for pid, kind in kinds.items() if kind == WORKER}
    for pid, (up, _ticks) in stats.items():
        if pid in kinds:
            continue
        parent, depth = up, 0
        while parent in stats and parent not in found and depth < 8:
            parent, depth = stats[parent][0], depth + 1
        if parent in found:
            kinds[pid] = CHILD
    return kinds


def _processes() -> tuple[dict[int, tuple[int, int]], dict[int, set[str] | None]]:
    """Every process's (parent, CPU ticks); the workers' -XX flags.

    The second map also holds, with None, every process whose command line
    read empty (exiting) or could not be read.
    """
    stats: dict[int, tuple[int, int]] = {}
    workers: dict[int, set[str] | None] = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            stats[pid] = (int(fields[1]), int(fields[11]) + int(fields[12]))
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                argv = [b""]
            if argv == [b""]:
                workers[pid] = None
            elif _WORKER_MAIN in argv:
                workers[pid] = {a.decode() for a in argv if a.startswith(b"-XX:")}
    return stats, workers


def jit_cost(
    ring: RingAccess, cluster: ApacheStormCluster, tmp: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Word count (P=2, until idle) with the JVM's defaults and the lab's flags.

    Alternating, ``--field-rounds`` times each; the workers' CPU is what the
    lab's flags save (a Python topology's throughput is its tasks').
    """
    rows = []
    for quick in [False, True] * args.field_rounds:
        conf: dict[str, Any] = {
            "wordcount.lines": args.lines,
            "sr3.checkpoint.interval.s": 1.0,
        }
        if not quick:
            conf["topology.worker.childopts"] = JVM_DEFAULTS
        with WorkerCpu() as cpu:
            report = run_on_storm(
                topology_at(2, tmp),
                ring=ring,
                nimbus=cluster.nimbus,
                options=StormRunOptions(until_idle=True, conf=conf),
                secret_in_conf=False,
            )
        rows.append(
            {
                "worker_jvm": "lab flags" if quick else "JVM defaults",
                "tuples_per_s": report["throughput"]["tuples_per_s"],
                "seconds": report["seconds"],
                "worker_cpu_s": round(cpu.seconds, 1),
                "workers": len(cpu.ticks),
                "flags": sorted(cpu.flags),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def field_cost(
    ring: RingAccess, cluster: ApacheStormCluster, tmp: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Word count (P=2, until idle) without and with the hidden generation field.

    Alternating, ``--field-rounds`` times each, so neither side always runs first.
    """
    rows = []
    for field_on in [False, True] * args.field_rounds:
        report = run_on_storm(
            topology_at(2, tmp),
            ring=ring,
            nimbus=cluster.nimbus,
            options=StormRunOptions(
                until_idle=True,
                conf={"wordcount.lines": args.lines, "sr3.checkpoint.interval.s": 1.0},
                generation_field=field_on,
            ),
            secret_in_conf=False,
        )
        rows.append(
            {
                "generation_field": field_on,
                "tuples_per_s": report["throughput"]["tuples_per_s"],
                "bolt_tuples": report["throughput"]["bolt_tuples"],
                "seconds": report["seconds"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def measure(lab: Lab, args: argparse.Namespace) -> dict[str, Any]:
    conf = {
        "wordcount.lines": args.lines,
        "sr3.checkpoint.mode": "native",
        "sr3.checkpoint.interval.s": 1.0,
    }
    results: dict[str, Any] = {"throughput": [], "worker_kill": None}
    ring = RingAccess(lab.config(Sr3Config()))
    with tempfile.TemporaryDirectory(prefix="sr3-bench-storm-") as tmp:
        cluster = storm_cluster(lab, Path(tmp) / "storm")
        cluster.start()
        try:
            if args.only_field:
                results["field"] = field_cost(ring, cluster, Path(tmp), args)
                return results
            if args.only_jit:
                results["jit"] = jit_cost(ring, cluster, Path(tmp), args)
                return results
            for par in [] if args.only_overhead else args.par:
                path = topology_at(par, Path(tmp))
                storm = run_on_storm(
                    path,
                    ring=ring,
                    nimbus=cluster.nimbus,
                    options=StormRunOptions(until_idle=True, conf=conf),
                    secret_in_conf=False,
                )
                local = run_topology(
                    path, ring=ring, options=RunOptions(until_idle=True, conf=conf)
                ).to_dict()
                results["throughput"].append(
                    {
                        "par": par,
                        "storm_tuples_per_s": storm["throughput"]["tuples_per_s"],
                        "storm_bolt_tuples": storm["throughput"]["bolt_tuples"],
                        "storm_seconds": storm["seconds"],
                        "storm_startup_s": storm["startup_s"],
                        "local_tuples_per_s": local["throughput"]["tuples_per_s"],
                        "local_bolt_tuples": local["throughput"]["bolt_tuples"],
                        "local_seconds": local["seconds"],
                    }
                )
                print(json.dumps(results["throughput"][-1]), flush=True)
            if args.only_overhead:
                results["overhead"] = overhead(ring, cluster, Path(tmp), args)
                return results
            killed = run_on_storm(
                topology_at(2, Path(tmp)),
                ring=ring,
                nimbus=cluster.nimbus,
                options=StormRunOptions(
                    until_idle=True,
                    conf={**conf, "topology.message.timeout.secs": 5},
                    kills=[Kill("worker", args.kill_at)],
                ),
                secret_in_conf=False,
            )
            results["worker_kill"] = killed["recoveries"]
            results["overhead"] = overhead(ring, cluster, Path(tmp), args)
        finally:
            cluster.stop()
            ring.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--par", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--kill-at", type=float, default=3.0)
    parser.add_argument("--overhead-s", type=float, default=30.0)
    parser.add_argument(
        "--only-overhead", action="store_true", help="skip throughput and the kill"
    )
    parser.add_argument(
        "--only-field",
        action="store_true",
        help="only word count (P=2) with and without the hidden generation field",
    )
    parser.add_argument(
        "--only-jit",
        action="store_true",
        help="only word count (P=2) with the lab's worker JVM flags "
        f"({' '.join(LAB_JVM_FLAGS)}) and with the JVM's defaults",
    )
    parser.add_argument("--field-rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with bench_lab(3) as lab:
        results = measure(lab, args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    rows = [
        [
            r["par"],
            r["storm_tuples_per_s"],
            r["local_tuples_per_s"],
            f"{r['storm_tuples_per_s'] / max(r['local_tuples_per_s'], 1e-9):.2f}",
            r["storm_startup_s"],
        ]
        for r in results["throughput"]
    ]
    headers = ["par", "Storm tuples/s", "local tuples/s", "Storm/local", "start s"]
    print(table(headers, rows))
    for row in results.get("overhead") or []:
        print(
            f"checkpoints {row['checkpoints']}: {row['tuples_per_s']} tuples/s, "
            f"{row['epochs']} epochs, pause mean {row['mean_pause_s']} s, "
            f"max {row['max_pause_s']} s"
        )
    for row in results.get("field") or []:
        print(
            f"generation field {'on' if row['generation_field'] else 'off'}: "
            f"{row['tuples_per_s']} tuples/s ({row['bolt_tuples']} bolt tuples, "
            f"{row['seconds']} s)"
        )
    jit = results.get("jit") or []
    for label in ("JVM defaults", "lab flags"):
        mine = [r for r in jit if r["worker_jvm"] == label]
        if mine:
            tps = sum(r["tuples_per_s"] for r in mine) / len(mine)
            cpu = sum(r["worker_cpu_s"] for r in mine) / len(mine)
            print(f"workers with {label}: {tps:.0f} tuples/s, {cpu:.1f} worker CPU-s "
                  f"per run (mean of {len(mine)})")  # fmt: skip
    for rec in results["worker_kill"] or []:
        t = rec["timeline"]
        print(
            f"worker kill at {rec['at_s']} s: Storm part (detect, relaunch) "
            f"{t['detect_s']} s; ours: restore {t['restore_s']} s, replay "
            f"{t['replay_s']} s ({rec['mechanism']}, {rec['restored_bytes']} bytes)"
        )


if __name__ == "__main__":
    main()
