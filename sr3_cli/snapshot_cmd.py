"""``sr3 snapshot put|get``: synthetic keyed snapshots through the ring.

``put`` writes a base epoch and delta epochs, compacting to a full epoch when a
chain would exceed ``sr3.checkpoint.max.chain.length`` deltas. ``get`` recovers
the latest committed epoch into this process with star, line or tree recovery
(or lets the planner choose) and reports the timeline.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from backend.chain import FULL, ChainPolicy
from sr3.codec import (
    decode_key_group,
    encode_key,
    encode_key_group_raw,
    merge_key_group_blobs,
)
from sr3.config import parse_size
from sr3.errors import ConfigError
from sr3.manifest import Manifest
from sr3.recovery import Recoverer, RecoveryContext, RecoveryResult
from sr3.snapshot import SnapshotWriter
from sr3.synthetic import (
    SyntheticSpec,
    expected_value_at,
    iter_delta_key_groups,
    iter_key_groups,
    key_indices,
)
from sr3_cli.cluster import (
    Cluster,
    check_secret,
    cluster_config,
    open_cluster,
    secret_source,
)
from sr3_cli.output import Progress, emit_json, format_bytes, table

__all__ = [
    "put_synthetic",
    "recover_snapshot",
    "run_get",
    "run_put",
    "synthetic_full",
    "verify_snapshot",
]


def synthetic_full(
    spec: SyntheticSpec, key_group_count: int, epoch: int, update_fraction: float
) -> Iterator[tuple[int, bytes]]:
    """Yield FULL blobs of the synthetic state after relative epoch ``epoch``.

    Epoch 1 is the base; a later epoch folds the updates of epochs ``2..epoch``
    (what compaction writes as a new base).
    """
    if epoch <= 1:
        yield from iter_key_groups(spec, key_group_count)
        return
    for kg in range(key_group_count):
        indices = key_indices(spec, key_group_count, kg)
        if indices:
            entries = {
                encode_key(("k", i)): expected_value_at(
                    spec, ("k", i), epoch, update_fraction
                )
                for i in indices
            }
            yield kg, encode_key_group_raw(entries)


def put_synthetic(
    cluster: Cluster,
    *,
    owner: str,
    spec: SyntheticSpec,
    epochs: int = 1,
    update_fraction: float = 0.0,
    show_progress: bool = True,
    max_chain_length: int | None = None,
) -> list[dict[str, Any]]:
    """Write a synthetic snapshot: a full epoch, then ``epochs - 1`` incremental ones.

    An incremental epoch is a delta, or a full epoch when the chain would exceed
    ``max_chain_length`` deltas (default: ``sr3.checkpoint.max.chain.length``);
    a full epoch garbage-collects the older ones.
    """
    limit = (
        cluster.config.recovery.max_chain_length
        if max_chain_length is None
        else max_chain_length
    )
    policy = ChainPolicy(limit)
    writer = SnapshotWriter(
        store=cluster.store,
        manifests=cluster.manifests,
        max_shard_bytes=cluster.config.ring.max_shard_bytes,
        collect_garbage=True,  # a synthetic epoch is committed once published
    )
    latest = cluster.manifests.latest(owner)
    start = 1 if latest is None else latest.epoch + 1
    g = cluster.manifests.key_group_count(owner) or cluster.config.ring.key_group_count
    extra = {
        "synthetic": {
            "total_bytes": spec.total_bytes,
            "keys": spec.keys,
            "seed": spec.seed,
            "update_fraction": update_fraction,
            "first_epoch": start,
        }
    }
    reports = []
    for i in range(epochs):
        epoch, relative = start + i, i + 1
        total = spec.total_bytes
        bar = Progress(f"put {owner}@{epoch}", total) if show_progress else None

        def full(rel: int = relative) -> Iterator[tuple[int, bytes]]:
            return synthetic_full(spec, g, rel, update_fraction)

        def delta(rel: int = relative) -> Iterator[tuple[int, bytes]]:
            return iter_delta_key_groups(spec, g, rel, update_fraction)

        # the first epoch of a put is FULL; later ones as the chain rule says
        latest = cluster.manifests.latest(owner)
        kind = FULL if i == 0 else policy.kind_at(latest, epoch)
        report = writer.write(
            owner=owner,
            epoch=epoch,
            key_group_count=g,
            key_groups=full() if kind == FULL else delta(),
            kind=kind,
            extra=extra,
            progress=bar,
        )
        if bar is not None:
            bar.close()
        row: dict[str, Any] = {
            "owner": owner,
            "epoch": epoch,
            "kind": report.kind,
            "chain_length": report.manifest.chain_length,
            "shards": len(report.shards),
            "bytes": report.bytes_written,
            "seconds": round(report.seconds, 3),
            "mb_per_s": round(
                report.bytes_written / 1e6 / max(report.seconds, 1e-9), 1
            ),
        }
        if report.gc is not None:
            row["gc"] = {
                "epochs": report.gc.epochs,
                "shards": len(report.gc.shards),
                "replicas_deleted": report.gc.replicas_deleted,
            }
        reports.append(row)
    return reports


def verify_snapshot(
    manifest: Manifest, key_groups: dict[int, list[bytes | memoryview]]
) -> dict[str, Any]:
    """Check every key of a synthetic snapshot against its generator.

    Returns a dict with ``keys``, ``mismatches`` (first few) and ``ok``.
    """
    params = manifest.extra.get("synthetic")
    if not params:
        return {"ok": False, "error": f"{manifest.owner} is not a synthetic snapshot"}
    spec = SyntheticSpec(
        total_bytes=int(params["total_bytes"]),
        keys=int(params["keys"]),
        seed=int(params["seed"]),
    )
    relative_epoch = manifest.epoch - int(params["first_epoch"]) + 1
    fraction = float(params["update_fraction"])
    seen = 0
    bad: list[str] = []
    for blobs in key_groups.values():
        merged = decode_key_group(merge_key_group_blobs(list(blobs)))
        for key, fields in merged.entries.items():
            seen += 1
            want = expected_value_at(spec, key, relative_epoch, fraction)
            if fields != want and len(bad) < 10:
                bad.append(repr(key))
    ok = seen == spec.keys and not bad
    missing = spec.keys - seen
    return {
        "ok": ok,
        "keys": seen,
        "expected_keys": spec.keys,
        "missing": missing,
        "mismatches": bad,
    }


def recover_snapshot(
    cluster: Cluster,
    owner: str,
    *,
    mechanism: str = "auto",
    epoch: int | None = None,
    lazy: bool = True,
) -> RecoveryResult:
    """Recover ``owner`` into this process through the cluster's ring."""
    context = RecoveryContext(
        manifests=cluster.manifests,
        members=cluster.membership.members,
        pool=cluster.pool,
        node_config=cluster.config.node,
        recovery=replace(cluster.config.recovery, lazy_install=lazy),
    )
    return Recoverer(context).recover(owner, mechanism=mechanism, epoch=epoch)


def run_put(args: argparse.Namespace) -> int:
    """Write a synthetic snapshot; exit 0 on success."""
    spec = SyntheticSpec(
        total_bytes=parse_size(args.size), keys=args.keys, seed=args.seed
    )
    with open_cluster(cluster_config(args)) as cluster:
        reports = put_synthetic(
            cluster,
            owner=args.owner,
            spec=spec,
            epochs=args.epochs,
            update_fraction=args.update_fraction,
            show_progress=not args.json,
            max_chain_length=args.max_chain_length,
        )
    if args.json:
        emit_json({"epochs": reports})
    else:
        for r in reports:
            gc = r.get("gc")
            note = f"; gc dropped epochs {gc['epochs']}" if gc and gc["epochs"] else ""
            print(
                f"wrote {r['owner']}@{r['epoch']} ({r['kind']}, chain "
                f"{r['chain_length']}): {r['shards']} shards, "
                f"{format_bytes(r['bytes'])} in {r['seconds']:.2f}s "
                f"({r['mb_per_s']} MB/s){note}"
            )
    return 0


def _check_epoch(cluster: Cluster, owner: str, epoch: int) -> None:
    """Refuse an ``--epoch`` the owner does not have, naming those it has.

    Raises:
        ConfigError: no such committed epoch of ``owner``.
    """
    epochs = cluster.manifests.epochs(owner)
    if epoch in epochs:
        return
    if not epochs:
        msg = f"owner {owner!r} has no committed snapshot to recover; write one"
    elif epoch > max(epochs):
        msg = (
            f"owner {owner!r} has no epoch {epoch} yet: its latest committed epoch "
            f"is {max(epochs)}; drop --epoch to read the latest"
        )
    else:
        msg = (
            f"epoch {epoch} of owner {owner!r} was garbage-collected once a later "
            f"full epoch committed; its committed epochs are "
            f"{', '.join(map(str, epochs))}"
        )
    raise ConfigError(msg)


def run_get(args: argparse.Namespace) -> int:
    """Recover a snapshot (optionally verifying it); exit 1 on any mismatch."""
    with open_cluster(cluster_config(args), create=False) as cluster:
        check_secret(cluster, secret_source(args))
        if args.epoch is not None:
            _check_epoch(cluster, args.owner, args.epoch)
        got = recover_snapshot(
            cluster,
            args.owner,
            mechanism=args.mechanism,
            epoch=args.epoch,
            lazy=not args.eager,
        )
        manifest = cluster.manifests.manifest(args.owner, got.epoch)
    seconds = got.transfer_s
    result: dict[str, Any] = {
        "owner": args.owner,
        "epoch": got.epoch,
        "shards": got.shards,
        "bytes": got.bytes_received,
        "seconds": round(seconds, 3),
        "mb_per_s": round(got.bytes_received / 1e6 / max(seconds, 1e-9), 1),
        **got.to_dict(),
    }
    if args.verify:
        result["verify"] = verify_snapshot(manifest, got.layers)
    if args.json:
        emit_json(result)
        return 0 if not args.verify or result["verify"]["ok"] else 1
    print(
        f"recovered {args.owner}@{got.epoch} by {got.mechanism}: {got.shards} shards, "
        f"{format_bytes(got.bytes_received)} received in {seconds:.2f}s "
        f"({result['mb_per_s']} MB/s); resumed after {got.time_to_resume_s:.3f}s"
    )
    print(f"why: {got.reason}")
    if got.failed_holders:
        print(f"failed holders: {got.failed_holders}; re-plans: {got.replans}")
    rows = [
        [s.phase, f"{s.start_s:.3f}", f"{s.end_s:.3f}", s.detail[:60]]
        for s in got.timeline
    ]
    print(table(["phase", "start s", "end s", "detail"], rows))
    if args.verify:
        v = result["verify"]
        verdict = "OK" if v["ok"] else "MISMATCH"
        print(f"verify: {verdict}: {v.get('keys')} of {v.get('expected_keys')} keys")
    return 0 if not args.verify or result["verify"]["ok"] else 1
