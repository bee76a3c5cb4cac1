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
import json
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.recovery_baselines import (  # noqa: E402 - after sys.path
    RedisServer,
    raw_loopback_run,
    redis_load,
    redis_restore,
    spark_restart,
)
from bench.recovery_report import save_json, write_report  # noqa: E402 - after the sys.path insert
from bench.recovery_ring import LoopbackRing, context_of, recover_once  # noqa: E402 - after the sys.path insert
from bench.recovery_rows import (  # noqa: E402 - after the sys.path insert
    MECHANISMS,
    interleaved,
    median_of,
    scenario,
    show_row,
    spec_for,
)
from sr3.config import parse_size  # noqa: E402 - after the sys.path insert
from sr3.recovery import Recoverer  # noqa: E402 - after the sys.path insert
from sr3.synthetic import SyntheticSpec  # noqa: E402 - after the sys.path insert
from sr3_cli.cluster import open_cluster  # noqa: E402 - after the sys.path insert
from sr3_cli.snapshot_cmd import put_synthetic  # noqa: E402 - after the sys.path insert

RESULTS = ROOT / "bench" / "results"
BASELINES_ONLY = RESULTS / "recovery_baselines_only.json"
DELTA_EPOCHS, DELTA_FRACTION = 6, 0.5


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
                        save_json(rows, RESULTS)
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
        show_row(rows[-1])

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
    for row in interleaved(args.repeat, runs, after=ring.heal):
        show(row)
    for failures in (f for f in args.failures if f):
        for mech in MECHANISMS:
            show(median_of(1, partial(once, mech, failures), after=ring.heal))
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
            row = median_of(
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
            show_row(rows[-1])
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
        show_row(rows[-1])
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
            show_row(rows[-1])


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
                show=show_row,
            )
    if args.baselines_only:
        print(f"wrote {BASELINES_ONLY}; merge it with --append")
        return
    save_json(rows, RESULTS)
    write_report(rows, RESULTS)


if __name__ == "__main__":
    main()
