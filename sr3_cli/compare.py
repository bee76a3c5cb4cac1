"""``sr3 compare``: one topology on several engines, same input, same failures.

Each engine runs in turn in one lab (an embedded one unless ``--lab``), from
empty state, with the same Storm conf and the same failure schedule: task kills
(``--kill``) on the engines that have tasks to kill (the local cluster; Spark
retries its own tasks), ring node kills (``--kill-node``) on every engine, the
killed nodes started again before the next engine runs. After each run the
final committed state of every stateful bolt is read from the ring
(:meth:`backend.access.RingAccess.committed_dump`). Tuples per component are
sampled every :data:`~sr3_cli.compare_sampler.SAMPLE_S` from the run's own
Prometheus endpoint (:mod:`sr3_cli.compare_sampler`), which gives throughput over time.
:func:`~sr3_cli.compare_verdict.verdict` compares each engine's state and
sink outputs with the first engine's, key by key; :mod:`sr3_cli.compare_report`
writes ``results.json``, ``report.md`` and ``report.html``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from spark_bridge.kafka_sink import is_kafka_sink
from spark_bridge.kafka_start import is_kafka_spout
from sr3.config import Sr3Config
from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.commands import wait_for_members
from sr3_cli.compare_kafka import sink_topics
from sr3_cli.compare_sampler import SAMPLE_S, Progress, TupleSampler, per_second
from sr3_cli.compare_verdict import verdict
from sr3_cli.daemons.prometheus import targets_dir
from sr3_cli.lab import Lab
from sr3_cli.netns import LinkShape
from sr3_cli.run_checks import (
    check_node_ids,
    check_topology_file,
    parse_conf,
    parse_kill,
    parse_node_kill,
)
from storm_bridge.runner import NodeKill, RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess
from topology_api.topology import LoadedTopology, load_topology

__all__ = [
    "ENGINES",
    "CompareRequest",
    "compare",
    "compare_engines",
    "verdict",
]

ENGINES: Final = ("storm", "spark", "apache-storm")
#: Exit code when the engines disagree.
EXIT_DISAGREE: Final = 1
E_ENGINE = (
    "--engines {given!r}: unknown engine {name!r}; give a comma-separated list "
    "of storm, spark, apache-storm (as --engines storm,spark)"
)
E_NETEM = (
    "--netem needs the network-namespace lab: start one with `sudo sr3 lab up "
    "--netns --dir DIR` and pass --lab DIR (or set SR3_LAB); or compare on the "
    "loopback lab without --netem"
)
E_APACHE = (
    "--engines apache-storm needs a lab with a real Storm cluster: run `sr3 lab up "
    "--storm` and pass --lab DIR"
)


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
    netem: LinkShape | None = None


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


def compared_components(topology: LoadedTopology) -> list[str]:
    """Return the stateful bolts whose final state the verdict compares.

    A KafkaSink's state is its delivery bookkeeping (pending outputs, which the
    Spark engine keeps in its micro-batch files instead): not compared.
    """
    return [
        n
        for n in topology.stateful_components
        if topology.components[n].kind == "bolt"
        and not is_kafka_sink(topology.components[n].component_cls)
    ]


def with_lab_kafka(
    request: CompareRequest, topology: LoadedTopology, lab: Lab
) -> CompareRequest:
    """Point a Kafka topology at the lab's broker unless the conf names one.

    Every engine then reads the same topic from its start (each run starts from
    empty state, so from no recorded offsets): Kafka is the common input.
    """
    kafka = lab.kafka or {}
    if "sr3.kafka.bootstrap" in request.conf or not kafka.get("bootstrap"):
        return request
    classes = [c.component_cls for c in topology.components.values()]
    if not any(is_kafka_spout(c) or is_kafka_sink(c) for c in classes):
        return request
    conf = {**request.conf, "sr3.kafka.bootstrap": kafka["bootstrap"]}
    return replace(request, conf=conf)


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
    request = with_lab_kafka(request, topology, lab)
    stateful = compared_components(topology)
    sinks = sink_topics(topology, request.conf)
    check_node_ids((k.node for k in request.node_kills), lab.nodes)
    config = lab.config(Sr3Config.from_env())
    runs: dict[str, Any] = {}
    for i, engine in enumerate(request.engines, start=1):
        progress(f"[{i}/{len(request.engines)}] {engine}: running {topology.name}")
        started = time.monotonic()
        run_request, starts = request, {}
        if sinks is not None:
            # its own output topic: the verdict compares what each engine wrote
            run_request = replace(request, conf=sinks.conf(request.conf, engine))
            starts = sinks.prepare(engine)
        with (
            _scratch() as scratch,
            TupleSampler(
                targets_dir(lab.root), topology.name, engine, progress
            ) as sampler,
        ):
            report = _run_engine(engine, run_request, lab, config, spark, scratch)
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
            "throughput": per_second(sampler.samples),
            "kafka": {} if sinks is None else sinks.read(engine, starts),
        }
        keys = ", ".join(f"{n} {s['keys']} keys" for n, s in state.items())
        progress(f"[{i}/{len(request.engines)}] {engine}: done in {wall_s} s ({keys})")
    results = {
        "topology": topology.name,
        "file": str(request.file),
        "engines": list(request.engines),
        "conf": dict(request.conf),
        "duration_s": request.duration_s,
        "sample_s": SAMPLE_S,
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
    root = Path(tempfile.mkdtemp(prefix="sr3-compare-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _request(args: argparse.Namespace) -> CompareRequest:
    engines = parse_engines(args.engines)
    netem = LinkShape.parse(args.netem) if args.netem is not None else None
    if netem is not None and args.lab is None and not os.environ.get("SR3_LAB"):
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
        netem=netem,
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
        lab = Lab.load(Path(lab_dir).resolve())
        if request.netem is None:
            results = compare_engines(request, lab)
        else:
            if lab.netns is None:
                raise ConfigError(E_NETEM)
            with lab_netns.reshaped(lab, request.netem) as network:
                results = {**compare_engines(request, lab), "network": network}
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
