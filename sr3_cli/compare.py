"""``sr3 compare``: one topology on several engines, same input, same failures.

Each engine runs in turn in one lab (an embedded one unless ``--lab``), from
empty state, with the same Storm conf and the same failure schedule: task kills
(``--kill``) on the engines that have tasks to kill (the local cluster; Spark
retries its own tasks), ring node kills (``--kill-node``) on every engine, the
killed nodes started again before the next engine runs. After each run the
final committed state of every stateful bolt is read from the ring
(:meth:`backend.access.RingAccess.committed_dump`). Tuples per component are
sampled every :data:`SAMPLE_S` from the run's own Prometheus endpoint, which
gives throughput over time. :func:`verdict` compares each engine's state and
sink outputs with the first engine's, key by key; :mod:`sr3_cli.compare_report`
writes ``results.json``, ``report.md`` and ``report.html``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli.argtypes import at_least, positive_seconds
from sr3_cli.commands import wait_for_members
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.lab import Lab
from sr3_cli.run_checks import (
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_kill,
    parse_node_kill,
)
from storm_bridge.runner import NodeKill, RunOptions, TaskKill, run_topology
from storm_bridge.topology import load_topology
from storm_bridge.wiring import RingAccess

__all__ = [
    "ENGINES",
    "CompareRequest",
    "add_parsers",
    "compare_engines",
    "verdict",
]

ENGINES: Final = ("storm", "spark", "apache-storm")
#: Seconds between two samples of a run's tuple counters.
SAMPLE_S: Final = 0.5
#: Differing keys named per component in the verdict.
FIRST_KEYS: Final = 5
#: Exit code when the engines disagree.
EXIT_DISAGREE: Final = 1
E_ENGINE = (
    "--engines {given!r}: unknown engine {name!r}; give a comma-separated list "
    "of storm, spark, apache-storm (as --engines storm,spark)"
)
E_NETEM = (
    "--netem needs the network-namespace lab (`sr3 lab up --netns`), which is not "
    "built yet; compare on the loopback lab without --netem"
)
E_APACHE = (
    "--engines apache-storm needs a lab with a real Storm cluster: run `sr3 lab up "
    "--storm` and pass --lab DIR"
)

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"sr3 compare: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class CompareRequest:
    """What ``sr3 compare`` runs: one topology file on ``engines`` in turn."""

    file: Path
    engines: tuple[str, ...]
    kills: tuple[TaskKill, ...] = ()
    node_kills: tuple[NodeKill, ...] = ()
    conf: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    max_rows_per_batch: int = 250
    master: str = "local[2]"
    timeout_s: float = 600.0


def parse_engines(text: str) -> tuple[str, ...]:
    """Return the engines of ``--engines a,b``; refuse unknown or fewer than two."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        if name not in ENGINES:
            raise ConfigError(E_ENGINE.format(given=text, name=name))
    if len(set(names)) < 2 or len(set(names)) != len(names):  # noqa: PLR2004
        msg = (
            f"--engines {text!r}: give two or more different engines to compare "
            "(as --engines storm,spark)"
        )
        raise ConfigError(msg)
    return names


class TupleSampler:
    """Samples ``sr3_tuples_total`` per component from a run's metrics endpoint.

    The run lists its endpoint in ``targets`` as ``run-<topology>-<pid>.json``
    (:func:`sr3.metrics.write_target`); the sampler finds it there.
    """

    def __init__(
        self, targets: Path, topology: str, engine: str, progress: Progress
    ) -> None:
        self._target = targets / f"run-{topology}-{os.getpid()}.json"
        self._engine = engine
        self._progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[dict[str, Any]] = []
        self._started = 0.0

    def __enter__(self) -> TupleSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _url(self) -> str | None:
        try:
            targets = json.loads(self._target.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return f"http://{targets[0]['targets'][0]}/metrics"

    def _run(self) -> None:
        url = None
        shown = 0.0
        while not self._stop.wait(SAMPLE_S):
            url = url or self._url()
            if url is None:
                continue
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310
                    text = answer.read().decode("utf-8")
            except OSError:  # the run just ended (endpoint closed)
                continue
            counts: dict[str, int] = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "sr3_tuples_total":
                        name = sample.labels.get("component", "?")
                        counts[name] = counts.get(name, 0) + int(sample.value)
            t_s = round(time.monotonic() - self._started, 2)
            self.samples.append({"t_s": t_s, "tuples": counts})
            if t_s - shown >= 2.0:  # noqa: PLR2004 (a progress line every 2 s)
                shown = t_s
                self._progress(
                    f"{self._engine}: {t_s:.0f} s, {sum(counts.values())} tuples"
                )


def _per_second(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return tuples/s between samples, per component, and their peak."""
    times: list[float] = []
    rates: dict[str, list[float]] = {}
    for prev, cur in zip(samples, samples[1:], strict=False):
        dt = cur["t_s"] - prev["t_s"]
        if dt <= 0:
            continue
        times.append(cur["t_s"])
        for name in cur["tuples"]:
            delta = cur["tuples"][name] - prev["tuples"].get(name, 0)
            rates.setdefault(name, [0.0] * (len(times) - 1)).append(
                round(max(delta, 0) / dt, 1)
            )
        for series in rates.values():
            if len(series) < len(times):
                series.append(0.0)
    peak = {name: max(series) for name, series in rates.items() if series}
    return {"t_s": times, "per_s": rates, "peak_per_s": peak}


def _state(ring: RingAccess, topology: str, components: Sequence[str]) -> Any:
    state: dict[str, Any] = {}
    for name in components:
        epoch, rows = ring.committed_dump(topology, name)
        size = len(json.dumps(rows, sort_keys=True).encode("utf-8"))
        state[name] = {"epoch": epoch, "keys": len(rows), "bytes": size, "rows": rows}
    return state


def _run_engine(  # noqa: PLR0913 (one engine's run and its inputs)
    engine: str,
    request: CompareRequest,
    lab: Lab,
    config: Sr3Config,
    spark: Any,
    scratch: Path,
) -> dict[str, Any]:
    """Run one engine; return its report (the ``sr3 run --json`` dict)."""
    ring = RingAccess(config)
    kill_node = _node_killer(lab)
    targets = targets_dir(lab.root)
    try:
        if engine == "storm":
            options = RunOptions(
                until_idle=True,
                duration_s=request.duration_s,
                kills=request.kills,
                node_kills=request.node_kills,
                conf=dict(request.conf),
                timeout_s=request.timeout_s,
                metrics_targets=targets,
            )
            report = run_topology(
                request.file, ring=ring, options=options, kill_node=kill_node
            )
            return report.to_dict()
        if engine == "spark":
            return _run_spark(request, ring, lab, spark, scratch, targets)
        return _run_apache_storm(request, ring, lab, kill_node)
    finally:
        ring.close()


def _node_killer(lab: Lab) -> Callable[[str], None]:
    def kill(node: str) -> None:
        lab.kill_nodes([node])

    return kill


def _run_spark(  # noqa: PLR0913 (the Spark run's inputs)
    request: CompareRequest,
    ring: RingAccess,
    lab: Lab,
    spark: Any,
    scratch: Path,
    targets: Path,
) -> dict[str, Any]:
    from spark_bridge.runner import run_topology as run_on_spark  # noqa: PLC0415

    timers = [
        threading.Timer(k.at_s, lab.kill_nodes, args=([k.node],))
        for k in request.node_kills
    ]
    for timer in timers:
        timer.daemon = True
        timer.start()
    try:
        return run_on_spark(
            request.file,
            checkpoint_dir=scratch / "spark",
            master=request.master,
            until_idle=True,
            duration_s=request.duration_s,
            conf=dict(request.conf),
            max_rows_per_batch=request.max_rows_per_batch,
            spark=spark,
            ring=ring,
            metrics_targets=targets,
        )
    finally:
        for timer in timers:
            timer.cancel()


def _run_apache_storm(
    request: CompareRequest,
    ring: RingAccess,
    lab: Lab,
    kill_node: Callable[[str], None],
) -> dict[str, Any]:
    from sr3_cli.lab_storm import storm_cluster  # noqa: PLC0415 (Storm on demand)
    from storm_bridge.sparse.run import Kill, StormRunOptions, run_on_storm  # noqa: PLC0415

    cluster = storm_cluster(lab)
    if cluster is None:
        raise ConfigError(E_APACHE)
    kills = [
        Kill("task", k.at_s, index=k.index, component=k.component)
        for k in request.kills
    ]
    kills += [Kill("node", k.at_s, node=k.node) for k in request.node_kills]
    options = StormRunOptions(
        until_idle=True,
        duration_s=request.duration_s,
        kills=kills,
        conf=dict(request.conf),
        timeout_s=request.timeout_s,
    )
    report: dict[str, Any] = run_on_storm(
        request.file,
        ring=ring,
        nimbus=cluster.nimbus,
        options=options,
        supervisors=cluster,
        kill_node=kill_node,
        secret_in_conf=False,
    )
    return report


def _restart_killed(lab: Lab, nodes: Sequence[str]) -> None:
    """Start the nodes a run killed again, so the next engine has the same ring."""
    current = Lab.load(lab.root)
    dead = [n for n in dict.fromkeys(nodes) if not current.nodes[n].alive]
    if dead:
        current.start_nodes(dead, log_level="WARNING")
        wait_for_members(current, len(current.nodes))


def compare_engines(
    request: CompareRequest,
    lab: Lab,
    *,
    spark: Any = None,
    progress: Progress = _stderr,
) -> dict[str, Any]:
    """Run ``request`` on each engine in ``lab``; return the results with the verdict.

    ``spark``: a Spark session to use (None: the Spark run starts one).
    """
    topology = load_topology(request.file)
    stateful = [
        n for n in topology.stateful_components if topology.components[n].kind == "bolt"
    ]
    check_node_ids((k.node for k in request.node_kills), lab.nodes)
    config = lab.config(Sr3Config.from_env())
    runs: dict[str, Any] = {}
    for i, engine in enumerate(request.engines, start=1):
        progress(f"[{i}/{len(request.engines)}] {engine}: running {topology.name}")
        started = time.monotonic()
        with (
            _scratch() as scratch,
            TupleSampler(
                targets_dir(lab.root), topology.name, engine, progress
            ) as sampler,
        ):
            report = _run_engine(engine, request, lab, config, spark, scratch)
        wall_s = round(time.monotonic() - started, 3)
        ring = RingAccess(config)
        try:
            state = _state(ring, topology.name, stateful)
        finally:
            ring.close()
        _restart_killed(lab, [k.node for k in request.node_kills])
        task_kills = engine != "spark"
        runs[engine] = {
            "wall_s": wall_s,
            "task_kills_applied": task_kills and bool(request.kills),
            "report": report,
            "state": state,
            "samples": sampler.samples,
            "throughput": _per_second(sampler.samples),
        }
        keys = ", ".join(f"{n} {s['keys']} keys" for n, s in state.items())
        progress(f"[{i}/{len(request.engines)}] {engine}: done in {wall_s} s ({keys})")
    results = {
        "topology": topology.name,
        "file": str(request.file),
        "engines": list(request.engines),
        "conf": dict(request.conf),
        "duration_s": request.duration_s,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "schedule": {
            "kills": [
                {"component": k.component, "index": k.index, "at_s": k.at_s}
                for k in request.kills
            ],
            "node_kills": [
                {"node": k.node, "at_s": k.at_s} for k in request.node_kills
            ],
        },
        "stateful": stateful,
        "spouts": [n for n, c in topology.components.items() if c.kind == "spout"],
        "runs": runs,
    }
    results.update(verdict(results))
    return results


@contextmanager
def _scratch() -> Iterator[Path]:
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    root = Path(tempfile.mkdtemp(prefix="sr3-compare-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _differing(ref: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    return [k for k in sorted(set(ref) | set(other)) if ref.get(k) != other.get(k)]


def verdict(results: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``agree`` and ``differences``: every engine against the first.

    Final states are compared key by key for every stateful bolt; sink outputs
    (last output per key) where both engines report the sink.
    """
    engines = list(results["engines"])
    runs = results["runs"]
    ref_name = engines[0]
    ref = runs[ref_name]
    differences: list[dict[str, Any]] = []
    compared: list[dict[str, Any]] = []
    for engine in engines[1:]:
        run = runs[engine]
        for what, ours, theirs in (
            ("state", _rows(ref["state"]), _rows(run["state"])),
            (
                "outputs",
                ref["report"].get("outputs", {}),
                run["report"].get("outputs", {}),
            ),
        ):
            for component in sorted(
                set(ours) & set(theirs)
                if what == "outputs"
                else set(ours) | set(theirs)
            ):
                a, b = ours.get(component, {}), theirs.get(component, {})
                keys = _differing(a, b)
                compared.append(
                    {
                        "engine": engine,
                        "what": what,
                        "component": component,
                        "keys": len(set(a) | set(b)),
                        "differing": len(keys),
                    }
                )
                if keys:
                    differences.append(
                        {
                            "engine": engine,
                            "reference": ref_name,
                            "what": what,
                            "component": component,
                            "differing": len(keys),
                            "first_keys": [
                                {"key": k, ref_name: a.get(k), engine: b.get(k)}
                                for k in keys[:FIRST_KEYS]
                            ],
                        }
                    )
    return {
        "agree": not differences,
        "reference": ref_name,
        "compared": compared,
        "differences": differences,
    }


def _rows(state: Mapping[str, Any]) -> dict[str, Any]:
    return {name: s["rows"] for name, s in state.items()}


def _request(args: argparse.Namespace) -> CompareRequest:
    engines = parse_engines(args.engines)
    if args.netem:
        raise ConfigError(E_NETEM)
    check_topology_file(args.file)
    if "apache-storm" in engines and args.lab is None and not os.environ.get("SR3_LAB"):
        raise ConfigError(E_APACHE)
    return CompareRequest(
        file=Path(args.file),
        engines=engines,
        kills=tuple(parse_kill(k) for k in args.kill),
        node_kills=tuple(parse_node_kill(k) for k in args.kill_node),
        conf=parse_conf(args.conf),
        duration_s=args.duration,
        max_rows_per_batch=args.max_rows_per_batch,
        master=args.master,
    )


def compare(args: argparse.Namespace) -> int:
    """``sr3 compare``: run, write the report, exit 1 when the engines disagree."""
    from sr3_cli.compare_report import write_report  # noqa: PLC0415 (matplotlib)
    from sr3_cli.topology_cmd import embedded_lab  # noqa: PLC0415 (cycle)

    request = _request(args)
    lab_dir = args.lab or os.environ.get("SR3_LAB")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"compare-{request.file.stem}-{stamp}")
    if lab_dir:
        results = compare_engines(request, Lab.load(Path(lab_dir).resolve()))
    else:
        with embedded_lab() as lab:
            results = compare_engines(request, lab)
    write_report(results, out)
    _stderr(f"report in {out}/report.html (and report.md, results.json)")
    if results["agree"]:
        print(f"agree: {', '.join(results['engines'])} end in the same state ({out})")
        return 0
    first = results["differences"][0]
    print(
        f"DISAGREE: {first['engine']} vs {first['reference']}: {first['what']} of "
        f"{first['component']} differs at {first['differing']} keys, first "
        f"{first['first_keys'][0]['key']} ({out}/report.md)"
    )
    return EXIT_DISAGREE


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 compare`` to the ``sr3`` parser."""
    p = sub.add_parser(
        "compare",
        help="run a topology on several engines under the same failures; report",
    )
    p.add_argument("file", help="topology file (its stem is the topology name)")
    p.add_argument(
        "--engines",
        default="storm,spark",
        help="comma-separated, run in this order, the first is the reference: "
        "storm, spark, apache-storm (needs `sr3 lab up --storm`) (storm,spark)",
    )
    p.add_argument(
        "--kill",
        action="extend",
        nargs="+",
        default=[],
        metavar="COMPONENT:INDEX@SECONDS",
        help="SIGKILL task INDEX of COMPONENT (Storm engines; Spark retries its "
        "own tasks)",
    )
    p.add_argument(
        "--kill-node",
        action="extend",
        nargs="+",
        default=[],
        metavar="NODE@SECONDS",
        help="SIGKILL a ring node at a moment of each engine's run",
    )
    p.add_argument(
        "--netem",
        default=None,
        metavar="SPEC",
        help="per-host delay/bandwidth/loss (needs the netns lab: not built yet)",
    )
    p.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="longest run per engine, s (default: until idle, at most 600 s)",
    )
    p.add_argument(
        "-o",
        dest="conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Storm conf override for every engine (repeatable)",
    )
    p.add_argument(
        "--max-rows-per-batch",
        type=at_least(1),
        default=250,
        help="spout tuples per Spark micro-batch (250)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="report dir (default compare-<topology>-<UTC time>)",
    )
    p.add_argument(
        "--lab",
        default=None,
        metavar="DIR",
        help="run in this lab (default: $SR3_LAB, else an embedded one)",
    )
    p.set_defaults(handler=compare)
