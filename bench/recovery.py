"""Recovery benchmark: star, line and tree against raw loopback, Redis and Spark.

Usage: python bench/recovery.py [--sizes 10MB,100MB,1GB] [--shapes small,large]
       [--failures 0,1,2] [--baselines raw,redis,spark] [--netns]

For each state size and shape (``small``: 1 KiB values, many keys; ``large``:
1 MiB values, few keys) it writes a synthetic snapshot into a lab of five ring
nodes (r=3), a base only and, for small keys, a delta chain (6 epochs, half the
keys updated per epoch), then recovers it into this process with each structure,
killing 0, 1 or 2 holders (SIGKILL) as the first bytes reach R. Time to resume is
measured from recovery start until R served a read of a key (lazy install;
``star-eager`` decodes everything at install, for comparison). Failure-free cells
and the raw baseline report the median of ``--repeat`` runs (default 3).

Baselines on the same keys and values: (a) a raw loopback copy of as many bytes,
sent from distinct memory and received into fresh 4 MiB buffers kept to the end,
as R keeps its shards (``raw-pretouched``: into one buffer touched before the
clock starts, the link alone), (b) Storm's default persistent state, a Redis
hash per task restored with HGETALL + msgpack decode, (c) Spark's state store:
an applyInPandasWithState query restarted from its checkpoint, HDFS-backed and
RocksDB providers.

``--netns`` adds a bandwidth-limited run (bench/recovery_netns.py): R in a network
namespace behind a veth limited to 100 Mbit/s with 20 ms round trips.

``--baselines-only`` measures the baselines alone (Spark at 1 GB takes minutes);
a later run merges those rows with ``--append FILE``.

Writes bench/results/recovery.{csv,json,md} and one PNG per scenario. Not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu import cores, own_cpu_s, pids_cpu_s  # noqa: E402 - after sys.path
from bench.recovery_baselines import (  # noqa: E402
    RedisServer,
    raw_loopback_run,
    redis_load,
    redis_restore,
    spark_restart,
)
from sr3.config import parse_size  # noqa: E402
from sr3.recovery import Recoverer, RecoveryContext  # noqa: E402
from sr3.synthetic import SyntheticSpec  # noqa: E402
from sr3_cli.cluster import Cluster, open_cluster  # noqa: E402
from sr3_cli.commands import wait_for_members  # noqa: E402
from sr3_cli.lab import Lab  # noqa: E402
from sr3_cli.snapshot_cmd import put_synthetic  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BASELINES_ONLY = RESULTS / "recovery_baselines_only.json"
MECHANISMS = ("star", "line", "tree")
DELTA_EPOCHS, DELTA_FRACTION = 6, 0.5


def spec_for(size: int, shape: str) -> SyntheticSpec:
    value = 1024 if shape == "small" else 1024 * 1024
    return SyntheticSpec(total_bytes=size, keys=max(1, size // value), seed=42)


def scenario(
    shape: str, label: str, spec: SyntheticSpec, epochs: int
) -> dict[str, Any]:
    """The fields naming a loopback scenario in every row of it."""
    return {
        "network": "loopback",
        "shape": shape,
        "size": label,
        "size_bytes": spec.total_bytes,
        "keys": spec.keys,
        "epochs": epochs,
        "cores": cores(),
    }


def victims(mechanism: str, structure: dict[str, Any], count: int) -> list[str]:
    nodes: list[str] = structure["nodes"]
    if mechanism == "star":
        return sorted(nodes, key=lambda n: -len(structure["assignment"][n]))[:count]
    if mechanism == "line":
        # the middle of the chain, then its end (distinct even on a 2-node chain)
        return list(dict.fromkeys([nodes[(len(nodes) - 1) // 2], nodes[-1]]))[:count]
    return [nodes[1], nodes[0]][:count] if len(nodes) > 1 else nodes[:count]


def recover_once(
    recoverer: Recoverer,
    owner: str,
    mechanism: str,
    failures: int,
    kill: Callable[[list[str]], None],
    *,
    lazy: bool = True,
    holder_pids: Callable[[], list[int | None]] = list,
) -> dict[str, Any]:
    """Recover ``owner`` once; return its row (times, CPU seconds, timeline).

    ``holder_pids`` gives the ring nodes' process ids: their CPU seconds during the
    recovery go in ``holders_cpu_s`` and R's own in ``r_cpu_s``.
    """
    plan: dict[str, Any] = {}
    killed: list[str] = []

    def on_event(kind: str, info: Any) -> None:
        if kind == "plan" and not plan:
            plan.update(info["structure"])
        if kind == "data" and failures and not killed:
            killed.extend(victims(mechanism, plan, failures))
            kill(killed)

    pids = holder_pids()
    cpu_before = own_cpu_s(), pids_cpu_s(pids)
    result = recoverer.recover(owner, mechanism=mechanism, lazy=lazy, on_event=on_event)
    r_cpu, holders_cpu = own_cpu_s() - cpu_before[0], pids_cpu_s(pids) - cpu_before[1]
    row = {
        "mechanism": mechanism if lazy else f"{mechanism}-eager",
        "chosen": result.mechanism,
        "failures": failures,
        "killed": killed,
        "time_to_resume_s": result.time_to_resume_s,
        "transfer_s": result.transfer_s,
        "bytes_received": result.bytes_received,
        "state_bytes": result.state_bytes,
        "replans": result.replans,
        "failed_holders": result.failed_holders,
        "reason": result.reason,
        "timeline": [s.to_dict() for s in result.timeline],
        "r_cpu_s": round(r_cpu, 3),
        "holders_cpu_s": round(holders_cpu, 3),
    }
    del result
    gc.collect()
    return row


class LoopbackRing:
    """A lab of ring nodes on loopback, with kill and restart."""

    def __init__(self, root: Path, nodes: int = 5) -> None:
        self.lab = Lab(root=root)
        root.mkdir(parents=True)
        self.lab.save()
        self.lab.start_zookeeper()
        self.lab.add_nodes(nodes)
        self.lab.start_nodes(sorted(self.lab.nodes))
        wait_for_members(self.lab, nodes)
        self.count = nodes
        self.killed: list[str] = []

    def kill(self, node_ids: list[str]) -> None:
        self.lab.kill_nodes(node_ids, signal.SIGKILL)
        self.killed += node_ids

    def pids(self) -> list[int | None]:
        """Process ids of the ring nodes now."""
        return [node.pid for node in self.lab.nodes.values()]

    def heal(self) -> None:
        if self.killed:
            self.lab.start_nodes(sorted(set(self.killed)))
            wait_for_members(self.lab, self.count)
            self.killed = []

    def close(self) -> None:
        self.lab.stop_nodes()
        self.lab.stop_zookeeper()


def context_of(cluster: Cluster) -> RecoveryContext:
    return RecoveryContext(
        manifests=cluster.manifests,
        members=cluster.membership.members,
        pool=cluster.pool,
        node_config=cluster.config.node,
        recovery=cluster.config.recovery,
    )


def run_loopback(
    args: argparse.Namespace, rows: list[dict[str, Any]], tmp: Path
) -> None:
    if args.baselines_only:
        run_baselines_only(args, rows, tmp)
        return
    ring = LoopbackRing(tmp / "lab")
    redis = RedisServer() if "redis" in args.baselines else None
    try:
        with open_cluster(ring.lab.config()) as cluster:
            recoverer = Recoverer(context_of(cluster))
            for shape in args.shapes:
                for label in args.sizes:
                    size = parse_size(label)
                    spec = spec_for(size, shape)
                    chains = [1] + (
                        [DELTA_EPOCHS]
                        if shape == "small" and size <= args.delta_max
                        else []
                    )
                    for epochs in chains:
                        owner = f"bench/{shape}/{label}/{epochs}"
                        t0 = time.perf_counter()
                        put_synthetic(
                            cluster,
                            owner=owner,
                            spec=spec,
                            epochs=epochs,
                            update_fraction=DELTA_FRACTION if epochs > 1 else 0.0,
                            show_progress=False,
                        )
                        print(
                            f"[put] {owner} in {time.perf_counter() - t0:.1f}s",
                            flush=True,
                        )
                        base = scenario(shape, label, spec, epochs)
                        rows += _scenario_rows(
                            args, recoverer, ring, owner, base, with_raw=epochs == 1
                        )
                        if epochs == 1:
                            state_bytes = rows[-1]["state_bytes"]
                            _baselines(
                                args,
                                rows,
                                base,
                                spec,
                                state_bytes,
                                redis,
                                owner,
                                tmp,
                                raw=False,
                            )
                        _save(rows)
    finally:
        if redis is not None:
            redis.close()
        ring.close()


def _scenario_rows(
    args: argparse.Namespace,
    recoverer: Recoverer,
    ring: LoopbackRing,
    owner: str,
    base: dict[str, Any],
    *,
    with_raw: bool,
) -> list[dict[str, Any]]:
    """Recover ``owner`` every way the run asks for; return its rows (with ``base``).

    The failure-free runs of star, line, tree and (``with_raw``) the raw copies
    take turns, ``--repeat`` rounds of each in turn, so that the machine's drift
    (fresh memory is cheap one minute and dear the next on these VMs) reaches
    every structure and the raw bound alike; each row is its median run.
    """
    rows: list[dict[str, Any]] = []

    def show(row: dict[str, Any]) -> None:
        rows.append({**base, **row})
        _show(rows[-1])

    def once(mechanism: str, failures: int, lazy: bool = True) -> dict[str, Any]:
        return recover_once(
            recoverer,
            owner,
            mechanism,
            failures,
            ring.kill,
            lazy=lazy,
            holder_pids=ring.pids,
        )

    show(once("auto", 0))
    state_bytes = int(rows[-1]["state_bytes"])
    runs: dict[str, Callable[[], dict[str, Any]]] = {}
    if 0 in args.failures:
        runs.update({mech: partial(once, mech, 0) for mech in MECHANISMS})
    if with_raw and "raw" in args.baselines:
        for mechanism, keep in (("raw-loopback", True), ("raw-pretouched", False)):
            runs[mechanism] = partial(_raw_row, mechanism, state_bytes, keep)
    for row in _interleaved(args.repeat, runs, after=ring.heal):
        show(row)
    for failures in (f for f in args.failures if f):
        for mech in MECHANISMS:
            show(_median_of(1, partial(once, mech, failures), after=ring.heal))
    show(once("star", 0, lazy=False))
    return rows


def _raw_row(mechanism: str, state_bytes: int, keep: bool) -> dict[str, Any]:
    got = raw_loopback_run(state_bytes, keep=keep)
    return {
        **{k: round(v, 4) for k, v in got.items()},
        "mechanism": mechanism,
        "failures": 0,
        "bytes_received": state_bytes,
    }


def _interleaved(
    times: int,
    runs: dict[str, Callable[[], dict[str, Any]]],
    *,
    after: Callable[[], None] = lambda: None,
) -> list[dict[str, Any]]:
    """Run each of ``runs`` ``times`` times, taking turns; return median rows."""
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    for _ in range(times):
        for name, run in runs.items():
            try:
                got[name].append(run())
            finally:
                after()
    return [_median(samples) for samples in got.values() if samples]


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The median sample's row, with every sample's time under ``samples_s``."""
    ordered = sorted(samples, key=lambda r: float(r["time_to_resume_s"]))
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["samples_s"] = [round(float(r["time_to_resume_s"]), 4) for r in ordered]
    return row


def _median_of(
    times: int,
    run: Callable[[], dict[str, Any]],
    *,
    after: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Run ``times`` times; return the median run's row with every sample."""
    return _interleaved(times, {"run": run}, after=after)[0]


def run_baselines_only(
    args: argparse.Namespace, rows: list[dict[str, Any]], tmp: Path
) -> None:
    """Measure the baselines alone (no ring), e.g. Spark at 1 GB in its own run."""
    redis = RedisServer() if "redis" in args.baselines else None
    try:
        for shape in args.shapes:
            for label in args.sizes:
                size = parse_size(label)
                spec = spec_for(size, shape)
                base = {**scenario(shape, label, spec, 1), "run": "baselines-only"}
                owner = f"bench/{shape}/{label}/1"
                _baselines(args, rows, base, spec, size, redis, owner, tmp)
                BASELINES_ONLY.write_text(json.dumps(rows, indent=1, default=str))
    finally:
        if redis is not None:
            redis.close()


def _baselines(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    base: dict[str, Any],
    spec: SyntheticSpec,
    state_bytes: int,
    redis: RedisServer | None,
    owner: str,
    tmp: Path,
    *,
    raw: bool = True,
) -> None:
    if raw and "raw" in args.baselines:
        for mechanism, keep in (("raw-loopback", True), ("raw-pretouched", False)):
            row = _median_of(
                args.repeat,
                lambda keep=keep: dict(raw_loopback_run(state_bytes, keep=keep)),
            )
            rows.append(
                {
                    **base,
                    **row,
                    "mechanism": mechanism,
                    "failures": 0,
                    "bytes_received": state_bytes,
                }
            )
            _show(rows[-1])
    if redis is not None:
        load_s = redis_load(redis, owner, spec)
        # median of up to 5 restores: restores of 1 GB took 5 to 10 s in one run
        restores = [
            redis_restore(redis, owner, spec) for _ in range(min(args.repeat, 5))
        ]
        redis.client.delete(owner)
        restores.sort(key=lambda got: float(got["seconds"]))
        got = restores[(len(restores) - 1) // 2]
        rows.append(
            {
                **base,
                "mechanism": "redis",
                "failures": 0,
                "time_to_resume_s": got["seconds"],
                "hgetall_s": got["hgetall_s"],
                "load_s": load_s,
                "samples_s": [round(float(g["seconds"]), 3) for g in restores],
            }
        )
        _show(rows[-1])
    if "spark" in args.baselines and base["size_bytes"] <= args.spark_max:
        for provider in ("hdfs", "rocksdb"):
            try:
                got = spark_restart(spec, provider, tmp)
            except (RuntimeError, OSError) as exc:
                print(f"[spark-{provider}] skipped: {exc}", flush=True)
                continue
            rows.append(
                {
                    **base,
                    "mechanism": f"spark-{provider}",
                    "failures": 0,
                    "time_to_resume_s": got["restart_s"],
                    **got,
                }
            )
            _show(rows[-1])


def _show(row: dict[str, Any]) -> None:
    extra = f" chose={row['chosen']}" if row["mechanism"] == "auto" else ""
    if row.get("failures"):
        extra += f" killed={row.get('killed')} replans={row.get('replans')}"
    print(
        f"[{row['network']}/{row['shape']}/{row['size']}/e{row['epochs']}] "
        f"{row['mechanism']:<14} f={row['failures']} "
        f"resume {row['time_to_resume_s']:.3f}s{extra}",
        flush=True,
    )


def _save(rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recovery.json").write_text(json.dumps(rows, indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10MB,100MB,1GB")
    parser.add_argument("--shapes", default="small,large")
    parser.add_argument("--failures", default="0,1,2")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each failure-free cell and raw baseline; the median is reported",
    )
    parser.add_argument("--baselines", default="raw,redis,spark")
    parser.add_argument(
        "--delta-max", default="100MB", help="largest size given a delta chain"
    )
    parser.add_argument("--spark-max", default="1GB", help="largest size run on Spark")
    parser.add_argument(
        "--netns", action="store_true", help="add the 100 Mbit/s, 20 ms run (root)"
    )
    parser.add_argument("--netns-only", action="store_true")
    parser.add_argument("--netns-sizes", default="10MB,100MB")
    parser.add_argument(
        "--report-only", action="store_true", help="redraw from recovery.json"
    )
    parser.add_argument("--append", help="keep the rows of this earlier recovery.json")
    parser.add_argument(
        "--baselines-only",
        action="store_true",
        help="run only --baselines (no ring); merge later with --append",
    )
    args = parser.parse_args()
    args.sizes = args.sizes.split(",")
    args.shapes = args.shapes.split(",")
    args.failures = [int(f) for f in args.failures.split(",")]
    args.baselines = set(filter(None, args.baselines.split(",")))
    args.delta_max = parse_size(args.delta_max)
    args.spark_max = parse_size(args.spark_max)
    from bench.recovery_report import write_report

    if args.report_only:
        write_report(json.loads((RESULTS / "recovery.json").read_text()), RESULTS)
        return
    rows: list[dict[str, Any]] = []
    if args.append:
        rows = json.loads(Path(args.append).read_text())
    with tempfile.TemporaryDirectory(prefix="sr3-bench-") as tmp:
        if not args.netns_only:
            run_loopback(args, rows, Path(tmp))
        if args.netns or args.netns_only:
            from bench.recovery_netns import run_netns

            run_netns(
                args,
                rows,
                Path(tmp),
                recover_once=recover_once,
                spec_for=spec_for,
                show=_show,
            )
    if args.baselines_only:
        print(f"wrote {BASELINES_ONLY}; merge it with --append")
        return
    _save(rows)
    write_report(rows, RESULTS)


if __name__ == "__main__":
    main()
