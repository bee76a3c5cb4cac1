"""What a savepoint costs against an ordinary checkpoint, at about 1 GB of state.

A lab of 3 ring nodes (r=3, write quorum 2) holds one topology's committed state:
``--owners`` stateful tasks of ``--mb`` MB in all (synthetic 1 KiB values). In
one run this measures:

* an ordinary full checkpoint: every owner writes its state through the ring,
  then the epoch commits (the baseline);
* an ordinary delta checkpoint updating ``--update`` of the keys;
* ``sr3 savepoint create`` (``backend.committer.take_savepoint``): the
  committed epoch pinned by name, no state copied;
* a start from that savepoint (``EpochCommitter.start(start_from=...)``): its
  manifests copied to a new epoch and committed, the state left in place;
* what a savepoint pins on the ring: the bytes of every shard its manifests
  list, times r, kept until it is deleted.

    .venv/bin/python bench/savepoints.py --mb 1024

Writes ``bench/results/savepoints.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lab_session import bench_lab  # noqa: E402

from backend.access import RingAccess  # noqa: E402
from backend.committer import EpochCommitter, StartPoint, take_savepoint  # noqa: E402
from sr3.config import Sr3Config  # noqa: E402
from sr3.synthetic import (  # noqa: E402
    SyntheticSpec,
    iter_delta_key_groups,
    iter_key_groups,
)
from zk.checkpoints import CommitRecord  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TOPOLOGY = "spbench"
KEY_GROUPS = 64


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def checkpoint(
    access: RingAccess,
    committer: EpochCommitter,
    owners: list[str],
    specs: list[SyntheticSpec],
    epoch: int,
    update: float | None,
) -> None:
    """Write every owner's epoch (full, or a delta of ``update``), then commit."""
    for owner, spec in zip(owners, specs, strict=True):
        blobs = (
            iter_key_groups(spec, KEY_GROUPS)
            if update is None
            else iter_delta_key_groups(spec, KEY_GROUPS, epoch, update)
        )
        access.write(
            owner=owner,
            epoch=epoch,
            key_group_count=KEY_GROUPS,
            key_groups=blobs,
            kind="full" if update is None else "delta",
            offsets={"spout": epoch},
        )
    committer.commit(CommitRecord(epoch=epoch, owners=tuple(owners)))


def pinned_bytes(access: RingAccess, record: CommitRecord) -> int:
    """Bytes of the shards the savepoint's manifests list (one replica)."""
    total = 0
    for owner in record.owners:
        manifest = access.manifests.manifest(owner, record.epoch)
        metas = access.manifests.shards(owner)
        total += sum(metas[s].size for s in manifest.shard_ids)
    return total


def measure(mb: int, owners_n: int, update: float, repeats: int) -> dict[str, Any]:
    total = mb * 1024 * 1024
    owners = [f"{TOPOLOGY}/count/{i}" for i in range(owners_n)]
    specs = [SyntheticSpec(total // owners_n, seed=i) for i in range(owners_n)]
    with bench_lab(3) as lab:
        access = RingAccess(lab.config(Sr3Config()))
        committer = EpochCommitter(access, TOPOLOGY, background=False)
        try:
            epoch = committer.start()
            full_s = timed(
                lambda: checkpoint(access, committer, owners, specs, epoch, None)
            )
            epoch += 1
            delta_s = timed(
                lambda: checkpoint(access, committer, owners, specs, epoch, update)
            )
            record = access.checkpoints.committed(TOPOLOGY)
            assert record is not None
            creates, starts = [], []
            for n in range(repeats):
                name = f"bench-{n}"
                creates.append(timed(partial(take_savepoint, access, TOPOLOGY, name)))
                point = StartPoint(savepoint=name)
                starts.append(timed(partial(committer.start, start_from=point)))
            pinned = pinned_bytes(access, record)
            replicas = access.config.ring.replication_factor
        finally:
            committer.close()
            access.close()
    return {
        "state_mb": mb,
        "owners": owners_n,
        "update_fraction": update,
        "full_checkpoint_s": round(full_s, 3),
        "delta_checkpoint_s": round(delta_s, 3),
        "savepoint_create_s": round(statistics.median(creates), 4),
        "savepoint_create_max_s": round(max(creates), 4),
        "start_from_savepoint_s": round(statistics.median(starts), 4),
        "pinned_mb_per_replica": round(pinned / 2**20, 1),
        "pinned_mb_on_ring": round(pinned * replicas / 2**20, 1),
        "repeats": repeats,
    }


def markdown(r: dict[str, Any]) -> str:
    full = r["full_checkpoint_s"]
    rows = [
        ("ordinary full checkpoint (baseline)", full),
        (f"ordinary delta checkpoint ({r['update_fraction']:.0%} of keys)",
         r["delta_checkpoint_s"]),
        ("savepoint create (median)", r["savepoint_create_s"]),
        ("start from the savepoint (median)", r["start_from_savepoint_s"]),
    ]  # fmt: skip
    lines = [
        f"{r['state_mb']} MB of state in {r['owners']} tasks, 3 ring nodes, r=3; "
        f"medians of {r['repeats']} savepoints.",
        "",
        "| operation | seconds | x full checkpoint |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {name} | {s:.4f} | {s / full:.5f} |" for name, s in rows]
    lines += [
        "",
        f"A savepoint pins {r['pinned_mb_per_replica']} MB per replica "
        f"({r['pinned_mb_on_ring']} MB on the ring) until it is deleted.",
    ]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], out: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = ["full checkpoint", "delta checkpoint", "savepoint create", "start from it"]
    values = [
        r["full_checkpoint_s"],
        r["delta_checkpoint_s"],
        r["savepoint_create_s"],
        r["start_from_savepoint_s"],
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(names, values, color=["tab:gray", "tab:gray", "tab:blue", "tab:blue"])
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(f"savepoint against an ordinary checkpoint, {r['state_mb']} MB state")
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(
            f"{value:.3g} s",
            (bar.get_x() + bar.get_width() / 2, value),
            ha="center",
            va="bottom",
        )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="state in all (1024)")
    parser.add_argument("--owners", type=int, default=8, help="stateful tasks (8)")
    parser.add_argument("--update", type=float, default=0.05, help="delta share")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = measure(args.mb, args.owners, args.update, args.repeats)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "savepoints.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (RESULTS / "savepoints.md").write_text(text)
    plot(result, RESULTS / "savepoints.png")
    print(text)


if __name__ == "__main__":
    main()
