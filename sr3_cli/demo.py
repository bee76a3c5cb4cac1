"""``make demo``: the ring under failures, then exactly-once wordcount under failures.

Part 1: a lab, a keyed snapshot, two ring nodes SIGKILLed at once, a verified
read, the repair. Part 2: wordcount on the local Storm cluster, once without
failures and once with a stateful task and a ring node SIGKILLed mid-run; the
committed final states must be equal. Part 3: the same topology file on Spark
(``sr3 run --engine spark``, local[2]), SR3 as its recovery core: its committed
state must equal the Storm engine's; then its Spark checkpoint is deleted and
the state comes back from the ring.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sr3.config import parse_size
from sr3.errors import ConfigError, SR3Error
from sr3.snapshot import SnapshotReader
from sr3.synthetic import SyntheticSpec
from sr3_cli.cluster import open_cluster
from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab
from sr3_cli.output import format_bytes, step, table
from sr3_cli.snapshot_cmd import put_synthetic, verify_snapshot
from sr3_cli.status import collect_status

__all__ = ["run_demo"]

_OWNER = "demo/state"
_REPAIR_TIMEOUT_S = 60.0
_TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "wordcount.py"


def _sr3(lab: Lab, *args: str) -> Any:
    """Run ``sr3 ARGS --json`` against ``lab`` and return its parsed output."""
    env = dict(os.environ, SR3_LAB=str(lab.root))
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"sr3 {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        raise SR3Error(msg)
    return json.loads(proc.stdout)


def _wordcount(lab: Lab, *kills: str) -> tuple[dict[str, Any], dict[str, Any]]:
    report = _sr3(lab, "run", str(_TOPOLOGY), "--until-idle", *kills)
    state = _sr3(
        lab, "state", "dump", "--topology", "wordcount", "--component", "count"
    )
    tput = report.get("throughput", {}).get("spout_tuples_per_s", 0)
    cps = report.get("checkpoints", {})
    print(
        f"    {tput:.0f} spout tuples/s, {cps.get('count', 0)} checkpoints "
        f"(last committed epoch {cps.get('last_committed_epoch')}), "
        f"{len(state)} words in the committed state"
    )
    batches = report.get("micro_batches")
    if batches:
        lat = batches.get("latency_ms", {})
        print(
            f"    {batches.get('count')} micro-batches, p50 {lat.get('p50')} ms; "
            f"SR3 ring writes {batches.get('sr3_share')} of batch time"
        )
    for rec in report.get("recoveries", []):
        tl = rec.get("timeline", {})
        phases = ", ".join(
            f"{name} {tl.get(key):.2f}s"
            for name, key in (
                ("detect", "detect_s"),
                ("restore", "restore_s"),
                ("replay", "replay_s"),
            )
            if tl.get(key) is not None
        )
        print(
            f"    recovery after {rec.get('cause')} ({rec.get('mechanism')}): {phases}"
        )
    return report, state


def _print_status(lab: Lab) -> dict[str, object]:
    with open_cluster(lab.config()) as cluster:
        status = collect_status(cluster, lab)
    rows = [
        [n["id"], "yes" if n["alive"] else "NO", n["shards"], format_bytes(n["bytes"])]
        for n in status["nodes"]
    ]
    print(table(["node", "alive", "shards", "bytes"], rows))
    print(
        f"under-replicated shards: {status['under_replicated']}, lost: {status['lost']}"
    )
    return status


_MARKER = "sr3-demo"
_LAB_ENTRIES = frozenset(
    {
        "lab.json",
        "lab.json.tmp",
        "lab.lock",
        "secret",
        "zk",
        "nodes",
        "spark",
        "spark-checkpoint",
    }
)


def _check_wipeable(root: Path, *, default: bool) -> None:
    """Refuse to wipe ``root`` unless it is empty or a demo's own lab.

    A demo's lab holds a marker file; the default dir is also wiped when it
    holds only lab files (demos before the marker left those).

    Raises:
        ConfigError: it is a file, or a directory holding anything else.
    """
    if not root.exists():
        return
    if not root.is_dir():
        msg = f"demo dir {root} is a file; give `sr3 demo --dir` a directory"
        raise ConfigError(msg)
    names = {p.name for p in root.iterdir()}
    old_demo = default and "lab.json" in names and names <= _LAB_ENTRIES
    if names and _MARKER not in names and not old_demo:
        msg = (
            f"demo dir {root} is not empty and not a demo lab; `sr3 demo` wipes "
            "its dir first, so give it a new or empty one (`--dir /tmp/sr3-demo`)"
        )
        raise ConfigError(msg)


def run_demo(
    root: Path, *, size: str = "200MB", nodes: int = 5, default: bool = False
) -> int:
    """Run the ring demo in ``root`` (wiped first); return 0 when every check held.

    Raises:
        ConfigError: ``size`` is not a size, or ``root`` holds anything but an
            earlier demo (see :func:`_check_wipeable`; ``default`` says it is
            the default dir).
    """
    total_bytes = parse_size(size)
    _check_wipeable(root, default=default)
    if root.exists():
        try:
            old = Lab.load(root)
            old.stop_nodes()
            old.stop_zookeeper()
        except (SR3Error, OSError, ValueError) as exc:
            print(f"(an old lab in {root} could not be stopped cleanly: {exc})")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / _MARKER).write_text("a lab of `sr3 demo`, wiped by its next run\n")
    lab = Lab(root=root)
    lab.save()
    ok = True
    try:
        with step(f"start ZooKeeper and {nodes} ring nodes in {root}"):
            lab.start_zookeeper()
            lab.add_nodes(nodes)
            lab.start_nodes(sorted(lab.nodes))
            wait_for_members(lab, nodes)
        spec = SyntheticSpec(total_bytes=total_bytes, keys=None, seed=7)
        with (
            step(f"write a {size} keyed snapshot with r=3"),
            open_cluster(lab.config()) as c,
        ):
            for r in put_synthetic(c, owner=_OWNER, spec=spec, show_progress=False):
                print(
                    f"    {r['shards']} shards, {format_bytes(r['bytes'])}, "
                    f"{r['mb_per_s']} MB/s"
                )
        _print_status(lab)
        victims = ["node-2", "node-4"]
        with step(f"SIGKILL {' and '.join(victims)} at once"):
            lab.kill_nodes(victims)
            killed_at = time.monotonic()
        with (
            step("read the snapshot back and verify every key"),
            open_cluster(lab.config()) as c,
        ):
            reader = SnapshotReader(store=c.store, manifests=c.manifests)
            manifest = reader.manifest(_OWNER)
            kgs: dict[int, list[bytes | memoryview]] = {}
            for shard in reader.fetch(manifest):
                for kg, blob in shard.key_groups.items():
                    kgs.setdefault(kg, []).append(blob)
            verdict = verify_snapshot(manifest, kgs)
            ok &= bool(verdict["ok"])
            print(
                f"    {verdict['keys']} keys, "
                f"{'all match' if verdict['ok'] else verdict}"
            )
        with step("wait for repair: every shard back to r=3 live replicas"):
            under, live = -1, nodes
            # repaired = the kills were detected (sessions expired) and every
            # shard has r live replicas again
            while time.monotonic() - killed_at < _REPAIR_TIMEOUT_S:
                with open_cluster(lab.config()) as c:
                    status = collect_status(c, lab)
                under, live = int(status["under_replicated"]), int(status["live_nodes"])
                if under == 0 and live == nodes - len(victims):
                    break
                time.sleep(0.1)
            took = time.monotonic() - killed_at
            print(
                f"    {under} under-replicated on {live} live nodes {took:.1f}s "
                "after the kill (target: 0 within 10 s, detection included)"
            )
            ok &= under == 0 and live == nodes - len(victims)
        _print_status(lab)
        with step("restart the killed ring nodes on their data dirs"):
            lab.start_nodes(victims)
            wait_for_members(lab, nodes)
        with step(
            f"wordcount on the local Storm cluster, no failures ({_TOPOLOGY.name})"
        ):
            _, clean = _wordcount(lab)
        with step(
            "wordcount again: SIGKILL stateful task count:1 and ring node node-3"
        ):
            _, failed = _wordcount(
                lab, "--kill", "count:1@2.0", "--kill-node", "node-3@3.0"
            )
        same = clean == failed
        ok &= same and bool(clean)
        print(
            "    committed final state "
            + (
                "equals the failure-free run's"
                if same
                else "DIFFERS from the failure-free run"
            )
        )
        spark_dir = root / "spark-checkpoint"
        with step("the same topology on Spark (sr3 run --engine spark, local[2])"):
            _, on_spark = _wordcount(
                lab, "--engine", "spark", "--checkpoint-dir", str(spark_dir)
            )
        same = on_spark == clean
        ok &= same
        print(
            "    Spark's committed state "
            + ("equals the Storm engine's" if same else "DIFFERS from Storm's")
        )
        with step(
            "delete the Spark checkpoint, run again with --resume: state from the ring"
        ):
            shutil.rmtree(spark_dir)
            report, restored = _wordcount(
                lab,
                "--engine",
                "spark",
                "--checkpoint-dir",
                str(spark_dir),
                "--resume",
            )
        same = restored == clean and bool(report.get("recoveries"))
        ok &= same
        print(
            f"    restored {report.get('recoveries', [{}])[0].get('restored_keys')} "
            "keys from the ring; state "
            + ("equals the Storm engine's" if same else "DIFFERS")
        )
    finally:
        with step("stop the lab"):
            lab.stop_nodes()
            lab.stop_zookeeper()
    print("demo: " + ("all checks passed" if ok else "A CHECK FAILED"))
    return 0 if ok else 1
