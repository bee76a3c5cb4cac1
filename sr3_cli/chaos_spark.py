"""Chaos schedules on a Spark standalone cluster: ``--engine spark-standalone``.

Each run of the topology is a driver process of its own (a SparkContext per
process), ``sr3 run --engine spark --master URL --until-idle``, against the
lab's cluster (``sr3 lab up --spark``) or ``--master``, whose workers run on
this machine. A schedule's timeline starts at the run's first committed
micro-batch; then its ``kill-executor`` faults SIGKILL one of the application's
executor JVMs (the worker launches a new one, with a new executor id), its
``kill-driver`` fault SIGKILLs the driver's process group once its time has
come and a second micro-batch committed (so the chain restored has a delta;
a new driver resumes from the ring with ``--resume`` and a fresh Spark
checkpoint), and the lab's
:class:`~sr3_cli.chaos_runs.Injector` kills and restarts ring nodes. The final
committed state must equal a failure-free run's on the same cluster
(:func:`~sr3_cli.chaos_runs.verdict`). A recovery is timed from the kill to the
first micro-batch committed after it (its Spark commit file, written once the
ring commit is done).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

from sr3.config import Sr3Config
from sr3.errors import ConfigError, SR3Error
from sr3.net import free_port
from sr3.recovery.transfer_plan import BROKEN_BUILD_ENV
from sr3_cli.chaos import SPARK_ROWS, Fault, Outcome, Schedule
from sr3_cli.chaos_compare import Comparison, choose_comparison, reference_runs
from sr3_cli.chaos_runs import Injector, final_state, verdict
from sr3_cli.lab import Lab, resolve_lab_dir
from storm_bridge.report import RunReport
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

__all__ = ["E_NO_SPARK", "SparkTarget", "check_options", "spark_runner"]

E_NO_SPARK: Final = (
    "--engine spark-standalone needs a Spark standalone cluster: a lab's "
    "(`sr3 lab up --spark --dir DIR`, then --lab DIR) or --master "
    "spark://HOST:PORT (its workers on this machine) with --lab DIR of the ring"
)
#: How often the campaign looks at a driver's commits and executors (a 50 ms
#: poll: a kill lands within that of its time; a stuck driver is ended by --timeout).
_POLL_S: Final = 0.05
_LOG_TAIL: Final = 2000


@dataclass(frozen=True)
class SparkTarget:
    """The Spark standalone cluster a campaign's drivers run on."""

    master: str


@dataclass
class _Driver:
    """One driver process and its Spark checkpoint."""

    proc: subprocess.Popen[bytes]
    port: int
    checkpoint: Path
    out: Path
    err: Path


@dataclass
class _Run:
    """A run's drivers (a first, a resumed one after a ``kill-driver``)."""

    drivers: list[_Driver] = field(default_factory=list)
    #: Monotonic time of each micro-batch committed, in order of appearance.
    commits: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: ``(fault, monotonic time of the kill, what was killed)``.
    kills: list[tuple[Fault, float, str]] = field(default_factory=list)


def check_options(args: argparse.Namespace) -> None:
    """Refuse options ``--engine spark-standalone`` cannot honour.

    Raises:
        ConfigError: no cluster named, or an option of another engine.
    """
    if args.master is None and resolve_lab_dir(args.lab) is None:
        raise ConfigError(E_NO_SPARK)
    if args.master is not None and not str(args.master).startswith("spark://"):
        msg = (
            f"--master {args.master}: give a standalone master's "
            "spark://HOST:PORT (`sr3 status --json` of a `sr3 lab up --spark` lab)"
        )
        raise ConfigError(msg)
    if args.mode == "local" or args.netns_faults or args.nimbus is not None:
        flag = (
            "--mode local" if args.mode == "local"
            else "--netns-faults" if args.netns_faults else "--nimbus"
        )  # fmt: skip
        msg = (
            f"{flag}: --engine spark-standalone runs Spark drivers on the "
            "standalone cluster, with no netns faults; leave it out"
        )
        raise ConfigError(msg)


def spark_target(args: argparse.Namespace, lab: Lab) -> SparkTarget:
    """The cluster of ``--master``, else the lab's."""
    if args.master is not None:
        return SparkTarget(str(args.master))
    spark = lab.spark
    if spark is None or not spark.get("master"):
        msg = f"the lab at {lab.root} runs no Spark cluster: {E_NO_SPARK}"
        raise ConfigError(msg)
    return SparkTarget(str(spark["master"]))


def spark_runner(
    args: argparse.Namespace, lab: Lab, path: Path, conf: dict[str, Any]
) -> tuple[Callable[[Schedule], Outcome], Comparison]:
    """The failure-free run(s) on the cluster, then a runner of schedules there.

    ``--compare auto`` runs the failure-free run twice
    (:func:`~sr3_cli.chaos_compare.choose_comparison`).
    """
    target = spark_target(args, lab)
    clean = _Runner(lab, path, target, conf, args.timeout)
    endings = []
    for _ in range(reference_runs(args.compare)):
        report, expected, reason = clean.run(())
        if reason or report is None:
            msg = (
                f"the failure-free run of {path} on {target.master} did not end "
                f"cleanly: {reason or 'no report'}; fix the topology, its -o conf "
                "or the cluster before a campaign"
            )
            raise ConfigError(msg)
        endings.append((expected, None))
    comparison = choose_comparison(args.compare, path, endings)
    clean.comparison = comparison
    return partial(_run_schedule, clean, endings[0][0]), comparison


def _run_schedule(runner: _Runner, expected: Mapping[str, Any], s: Schedule) -> Outcome:
    started = time.monotonic()
    try:
        report, state, reason = runner.run(s.faults, expected=expected)
    except SR3Error as exc:
        reason = f"the run raised {type(exc).__name__}: {exc}"
        return Outcome(s, False, time.monotonic() - started, reason, None)
    return Outcome(s, not reason, time.monotonic() - started, reason, report)


class _Runner:
    """Runs the topology on the cluster with a schedule's faults."""

    def __init__(  # noqa: PLR0913 (what every run of a campaign shares)
        self,
        lab: Lab,
        path: Path,
        target: SparkTarget,
        conf: Mapping[str, Any],
        timeout_s: float,
    ) -> None:
        self.lab = lab
        self.path = path
        self.target = target
        self.conf = dict(conf)
        self.timeout_s = timeout_s
        #: How a schedule's end is compared (None: exactly).
        self.comparison: Comparison | None = None

    def run(
        self,
        faults: tuple[Fault, ...] | list[Fault],
        *,
        expected: Mapping[str, Any] | None = None,
    ) -> tuple[RunReport | None, dict[str, Any], str]:
        """Run once; return the report, the final committed state and a verdict."""
        injector = Injector(self.lab, faults, kills_nodes=True)
        run = _Run()
        with tempfile.TemporaryDirectory(prefix="sr3-chaos-standalone-") as tmp:
            stop = threading.Event()
            watcher = threading.Thread(
                target=_watch_commits, args=(run, stop), daemon=True
            )
            run.drivers.append(self._driver(Path(tmp), 0, resume=False))
            watcher.start()
            try:
                started = self._await_first_commit(run)
                if started is not None:
                    injector.start()
                    self._kill(run, faults, started)
                raw = self._await_end(run)
            finally:
                stop.set()
                watcher.join()
                for driver in run.drivers:
                    _kill_group(driver.proc)
                injector.finish(self.timeout_s)
            _node_kills(run, faults, started)
            ring = RingAccess(self.lab.config(Sr3Config()))
            try:
                state = final_state(ring, load_topology(self.path))
            finally:
                ring.close()
        report = None if raw is None else _report(raw, _recoveries(run))
        errors = run.errors + injector.errors
        if report is None:
            return None, state, "; ".join(errors) or "the driver printed no report"
        reason = verdict(
            report, state, expected or state, None, errors, self.comparison
        )
        return report, state, reason

    def _driver(self, tmp: Path, index: int, *, resume: bool) -> _Driver:
        checkpoint = tmp / f"driver-{index}"
        port = free_port()
        argv = [
            sys.executable, "-m", "sr3_cli", "run", str(self.path),
            "--engine", "spark", "--master", self.target.master,
            "--lab", str(self.lab.root), "--until-idle",
            "--duration", str(self.timeout_s), "--checkpoint-dir", str(checkpoint),
            "--max-rows-per-batch", str(SPARK_ROWS), "--json",
            *(a for k, v in self.conf.items() for a in ("-o", f"{k}={json.dumps(v)}")),
            *(["--resume"] if resume else []),
        ]  # fmt: skip
        # the driver's port names its executors (their --driver-url); the
        # executors are the worker's children, not the driver's: the test-only
        # broken-build switch reaches their restores through Spark's executorEnv
        submit = f"--conf spark.driver.port={port}"
        broken = os.environ.get(BROKEN_BUILD_ENV)
        if broken:
            submit += f" --conf spark.executorEnv.{BROKEN_BUILD_ENV}={broken}"
        env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell"}
        out, err = tmp / f"driver-{index}.json", tmp / f"driver-{index}.log"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(  # noqa: S603 (sr3 run, our arguments)
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                # its JVM is in its group: a kill-driver kills both
                start_new_session=True,
            )
        return _Driver(proc, port, checkpoint, out, err)

    def _await_first_commit(self, run: _Run) -> float | None:
        """Wait for the first committed micro-batch; return when it was."""
        deadline = time.monotonic() + self.timeout_s
        driver = run.drivers[0]
        while not run.commits:
            if driver.proc.poll() is not None or time.monotonic() > deadline:
                run.errors.append(
                    "the driver committed no micro-batch: " + _tail(driver.err)
                )
                return None
            time.sleep(_POLL_S)
        return run.commits[0]

    def _kill(
        self, run: _Run, faults: tuple[Fault, ...] | list[Fault], t0: float
    ) -> None:
        """Inject the schedule's executor and driver kills on its timeline."""
        for fault in sorted(faults, key=lambda f: f.at_s):
            if fault.kind not in ("kill-executor", "kill-driver"):
                continue
            delay = t0 + fault.at_s - time.monotonic()
            if delay > 0:  # the fault's time on the schedule, from the first commit
                time.sleep(delay)
            driver = run.drivers[-1]
            if fault.kind == "kill-driver":
                self._await_second_commit(run, driver)
            if driver.proc.poll() is not None:
                run.errors.append(f"{fault.describe()}: the run had ended")
                continue
            if fault.kind == "kill-driver":
                _kill_group(driver.proc)
                run.kills.append(
                    (fault, time.monotonic(), f"driver pid {driver.proc.pid}")
                )
                tmp = driver.checkpoint.parent
                run.drivers.append(self._driver(tmp, len(run.drivers), resume=True))
                continue
            executors = self._executors(driver)
            if not executors:
                run.errors.append(f"{fault.describe()}: the driver had no executor")
                continue
            victim = min(executors, key=int)
            try:
                os.kill(executors[victim], signal.SIGKILL)
            except ProcessLookupError:
                run.errors.append(f"{fault.describe()}: executor {victim} was gone")
                continue
            what = f"executor {victim} (pid {executors[victim]})"
            run.kills.append((fault, time.monotonic(), what))

    def _await_second_commit(self, run: _Run, driver: _Driver) -> None:
        """Wait until the run committed a micro-batch after its first one.

        A driver kill is resumed from the ring: with a second batch in, the
        chain it restores has a delta on its base, whatever the machine's load
        (a batch can take longer than the fault's time after the first commit).
        """
        deadline = time.monotonic() + self.timeout_s
        while len(run.commits) < 2 and time.monotonic() < deadline:
            if driver.proc.poll() is not None:
                return
            time.sleep(_POLL_S)

    def _executors(self, driver: _Driver) -> dict[str, int]:
        """The driver's executors, once it has one (a resumed driver starts)."""
        # pyspark loads only when a campaign runs on a Spark cluster
        from spark_bridge.standalone_jvms import driver_executors  # noqa: PLC0415

        deadline = time.monotonic() + self.timeout_s
        while driver.proc.poll() is None and time.monotonic() < deadline:
            executors = driver_executors(driver.port)
            if executors:
                return executors
            time.sleep(_POLL_S)
        return {}

    def _await_end(self, run: _Run) -> dict[str, Any] | None:
        """Wait for the last driver; return its report (None: it printed none)."""
        driver = run.drivers[-1]
        try:
            driver.proc.wait(self.timeout_s + 60.0)
        except subprocess.TimeoutExpired:
            run.errors.append(f"the driver did not end within {self.timeout_s} s")
            return None
        try:
            raw = json.loads(driver.out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            run.errors.append(
                f"the driver exited with code {driver.proc.returncode}: "
                + _tail(driver.err)
            )
            return None
        if not isinstance(raw, dict) or "error" in raw:
            run.errors.append(f"the driver failed: {raw}")
            return None
        return raw


def _watch_commits(run: _Run, stop: threading.Event) -> None:
    """Note when each driver's micro-batches commit (their Spark commit files)."""
    seen: set[tuple[int, str]] = set()
    while not stop.is_set():
        for index, driver in enumerate(list(run.drivers)):
            commits = driver.checkpoint / "spark" / "commits"
            try:
                names = [p.name for p in commits.iterdir() if p.name.isdigit()]
            except OSError:
                continue
            for name in sorted(names, key=int):
                if (index, name) not in seen:
                    seen.add((index, name))
                    run.commits.append(time.monotonic())
        stop.wait(_POLL_S)


def _node_kills(
    run: _Run, faults: tuple[Fault, ...] | list[Fault], started: float | None
) -> None:
    """Add the Injector's node kills, at their place on the timeline."""
    if started is None:
        return
    for fault in faults:
        if fault.kind == "kill-node":
            run.kills.append((fault, started + fault.at_s, f"ring node {fault.target}"))


def _recoveries(run: _Run) -> list[dict[str, Any]]:
    """Each kill, timed to the first micro-batch committed after it."""
    recoveries = []
    for fault, at, what in sorted(run.kills, key=lambda k: k[1]):
        after = [c for c in run.commits if c > at]
        cause = what if fault.kind == "kill-node" else fault.target
        recoveries.append(
            {
                "cause": cause,
                "killed": what,
                "at_s": fault.at_s,
                "timeline": {"total_s": round(after[0] - at, 4) if after else None},
            }
        )
    return recoveries


def _report(raw: Mapping[str, Any], recoveries: list[dict[str, Any]]) -> RunReport:
    return RunReport(
        topology=str(raw["topology"]),
        seconds=float(raw["seconds"]),
        idle=bool(raw["idle"]),
        counters=dict(raw.get("counters") or {}),
        checkpoints=dict(raw.get("checkpoints") or {}),
        recoveries=[*raw.get("recoveries", []), *recoveries],
        state=dict(raw.get("state") or {}),
        errors=list(raw.get("errors") or []),
        busy=None if raw["idle"] else "the driver's --duration ran out",
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a driver's process group (its Python process and JVM)."""
    # also after a normal end: a JVM left behind is in the group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL:]
    except OSError:
        return "(no log)"
