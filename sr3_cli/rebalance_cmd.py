"""``sr3 rebalance TOPOLOGY -e COMPONENT=N``: change a running topology's parallelism.

Mirrors ``storm rebalance``: ``-e`` names a component and its new task count,
``-w`` is how long to wait (here: for the hand-over to finish, as the local
cluster never deactivates the topology). The request goes through ZooKeeper
to the ``sr3 run`` of the topology (in another shell); that run moves the
component's keys between tasks at an epoch boundary while the rest of the
topology keeps running (``docs/rebalance.md``).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from sr3.errors import ConfigError
from sr3_cli.cluster import Cluster, cluster_config, open_cluster
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.output import emit_json
from topology_api.rebalance_plan import (
    ComponentInfo,
    RebalanceRequestError,
    check_request,
    parse_targets,
)
from zk.paths import unquote_name
from zk.rebalances import DONE, REFUSED, RebalanceRequest, ZkRebalanceStore

__all__ = ["rebalance", "running_topologies"]

E_NO_RUN = (
    "topology {topology!r} has no running run on this cluster (running: {running}); "
    "start it with `sr3 run FILE` in another shell (local checkpoints on: not "
    "--no-checkpoints, not sr3.checkpoint.mode=native) or `sr3 run FILE --engine "
    "spark` (with a ring: this cluster's ZooKeeper), then rebalance it"
)
E_RUN_GONE = (
    "the run of {topology!r} ended before it finished rebalance {request} (its live "
    "record is gone: the `sr3 run` stopped or was killed; the request was left "
    "{state}); nothing committed is lost: `sr3 run FILE --resume` starts from the "
    "ring's last committed epoch (at any parallelism up to the key-group count) "
    "and retires the request"
)
#: What ``sr3 rebalance`` tells the user of a run on the Spark engine.
SPARK_NOTE = (
    "{topology} runs on Spark, whose queries keep their state partitions for life "
    "(SPARK-53942): the rebalance is a controlled restart (the query stops after "
    "its micro-batch under way commits, a new one starts from that epoch at the "
    "new task counts with its state re-partitioned from the ring); every key "
    "pauses until the new query's first batch commits"
)


def running_topologies(cluster: Cluster) -> list[str]:
    """Return the topologies with a running ``sr3 run`` that takes rebalances."""
    store = ZkRebalanceStore(cluster.session)
    parent = cluster.session.paths.topologies
    with cluster.session.translate("list topologies", parent):
        names = [unquote_name(n) for n in cluster.session.children(parent)]
    return sorted(n for n in names if store.live(n) is not None)


def _components(live: dict[str, Any]) -> dict[str, ComponentInfo]:
    raw = dict(live.get("components") or {})
    return {str(n): ComponentInfo.from_dict(c) for n, c in raw.items()}


def _wait(
    store: ZkRebalanceStore, topology: str, request_id: str, wait_s: float
) -> RebalanceRequest | None:
    """Wait up to ``wait_s`` for the run to finish with the request.

    Raises:
        RebalanceRequestError: the run went away (its live record is gone)
            before it finished or refused the request.
    """
    changed = threading.Event()
    latest: list[RebalanceRequest | None] = [None]
    gone = threading.Event()

    def seen(request: RebalanceRequest | None) -> None:
        if request is not None and request.request_id == request_id:
            latest[0] = request
            if request.state in (DONE, REFUSED):
                changed.set()

    def live(exists: bool) -> None:
        if not exists:
            gone.set()
            changed.set()

    store.watch(topology, seen)
    store.watch_live(topology, live)
    changed.wait(wait_s)
    final = latest[0]
    if gone.is_set() and (final is None or final.state not in (DONE, REFUSED)):
        # the run may have written its verdict just before its record went
        found = store.get(topology)
        if found is not None and found[0].request_id == request_id:
            final = found[0]
        if final is None or final.state not in (DONE, REFUSED):
            state = final.state if final is not None else "requested"
            msg = E_RUN_GONE.format(topology=topology, request=request_id, state=state)
            raise RebalanceRequestError(msg)
    return final


def _summary(topology: str, result: dict[str, Any]) -> str:
    moves = ", ".join(
        f"{c} {t['from']}->{t['to']}" for c, t in dict(result["targets"]).items()
    )
    start, end = result.get("start_s"), result.get("end_s")
    took = "" if start is None or end is None else f" in {end - start:.2f} s"
    if result.get("how") == "restart":
        return (
            f"rebalanced {topology} by a controlled restart on Spark: {moves}{took} "
            f"(from epoch {result.get('epoch')}, {result.get('bytes_moved', 0)} "
            "bytes read by the new tasks, every key paused "
            f"{result.get('longest_key_pause_s', 0):.3f} s)"
        )
    return (
        f"rebalanced {topology}: {moves}{took} (epoch {result.get('epoch')}, "
        f"{result.get('bytes_moved', 0)} bytes read by the new tasks, longest key "
        f"pause {result.get('longest_key_pause_s', 0):.3f} s, "
        f"{result.get('attempts', 0)} hand-over attempts)"
    )


def _engine_note(topology: str, on_spark: bool) -> dict[str, str]:
    """The ``--json`` output's engine and note, for a run on Spark."""
    if not on_spark:
        return {}
    return {"engine": "spark", "note": SPARK_NOTE.format(topology=topology)}


def _lab_nimbus(args: argparse.Namespace) -> str | None:
    """The Nimbus of the lab named on the command line, if it runs Storm."""
    lab_dir = resolve_lab_dir(getattr(args, "lab", None))
    if lab_dir is None or not (lab_dir / "lab.json").exists():
        return None
    from sr3_cli.lab_storm import storm_cluster  # noqa: PLC0415 (Storm on demand)

    cluster = storm_cluster(Lab.load(lab_dir))
    return None if cluster is None else str(cluster.nimbus)


def _on_storm(args: argparse.Namespace, nimbus: str) -> int:
    """``sr3 rebalance`` of a topology running on real Storm (Nimbus's rebalance)."""
    from storm_bridge.sparse.rebalance import (  # noqa: PLC0415 (streamparse on demand)
        rebalance_on_storm,
    )
    from storm_bridge.sparse.submit import NimbusSession  # noqa: PLC0415

    targets = parse_targets(args.executors)
    result = rebalance_on_storm(
        NimbusSession(nimbus),
        args.topology,
        targets,
        workers=args.workers,
        wait_s=args.wait,
    )
    if args.json:
        emit_json({"result": result})
        return 0
    moves = ", ".join(
        f"{c} {t['from']}->{t['to']} executors" for c, t in result["targets"].items()
    )
    if args.workers is not None:
        moves = ", ".join(filter(None, [moves, f"{args.workers} workers"]))
    if result["done"]:
        print(
            f"rebalanced {args.topology} on Storm ({nimbus}): {moves} in "
            f"{result['seconds']:.2f} s; its moved tasks restarted and restored "
            "their last committed epoch"
        )
    else:
        print(f"rebalance of {args.topology} on Storm ({nimbus}) requested: {moves}")
    return 0


def _storm_runs(nimbus: str, topology: str) -> bool:
    from storm_bridge.apache.nimbus import (  # noqa: PLC0415 (streamparse on demand)
        NimbusUnreachableError,
    )
    from storm_bridge.sparse.submit import NimbusSession  # noqa: PLC0415

    try:
        return topology in NimbusSession(nimbus).topologies()
    except NimbusUnreachableError:
        return False


def rebalance(args: argparse.Namespace) -> int:
    """``sr3 rebalance``: ask the running run to change task counts; wait for it.

    A topology on real Storm (``--nimbus``, or the lab's Storm cluster running
    it) is rebalanced by Nimbus, as ``storm rebalance`` does: executors within
    the component's fixed task count, and ``-n`` workers.

    Raises:
        RebalanceRequestError: a bad request (unknown topology or component,
            stateless component, count out of range), refused before anything
            is written, or refused by the run.
        RebalanceBusyError: another rebalance of the topology is under way.
        ConfigError: ``-n`` given, or the wait ran out.
    """
    if args.wait < 0:
        msg = f"-w {args.wait}: the wait must be >= 0 seconds"
        raise ConfigError(msg)
    if args.nimbus is not None:
        return _on_storm(args, args.nimbus)
    nimbus = _lab_nimbus(args)
    if nimbus is not None and _storm_runs(nimbus, args.topology):
        return _on_storm(args, nimbus)
    if args.workers is not None:
        msg = (
            "-n (workers) does not apply to the local cluster: its tasks are "
            "processes of the `sr3 run`; give task counts with -e COMPONENT=N "
            "(-n applies to a topology on Storm: --nimbus HOST:PORT)"
        )
        raise ConfigError(msg)
    targets = parse_targets(args.executors)
    with open_cluster(cluster_config(args), create=False) as cluster:
        store = ZkRebalanceStore(cluster.session)
        live = store.live(args.topology)
        if live is None:
            running = ", ".join(running_topologies(cluster)) or "none"
            msg = E_NO_RUN.format(topology=args.topology, running=running)
            raise RebalanceRequestError(msg)
        check_request(args.topology, _components(live), targets)
        on_spark = live.get("engine") == "spark"
        if on_spark and not args.json:
            print(SPARK_NOTE.format(topology=args.topology), flush=True)
        started = time.monotonic()
        request = store.request(args.topology, targets)
        final = None
        if args.wait > 0:
            final = _wait(store, args.topology, request.request_id, args.wait)
    waited = time.monotonic() - started
    if final is not None and final.state == REFUSED:
        raise RebalanceRequestError(final.detail)
    if final is not None and final.state == DONE:
        if args.json:
            emit_json(
                {
                    "request": final.to_dict(),
                    "waited_s": round(waited, 3),
                    **_engine_note(args.topology, on_spark),
                }
            )
        else:
            print(_summary(args.topology, dict(final.result)))
        return 0
    if args.wait > 0:
        msg = (
            f"rebalance {request.request_id} of {args.topology!r} not done within "
            f"-w {args.wait:g} s; it goes on: `sr3 status` shows it"
        )
        raise ConfigError(msg)
    if args.json:
        emit_json(
            {
                "request": request.to_dict(),
                "waited_s": 0.0,
                **_engine_note(args.topology, on_spark),
            }
        )
    else:
        print(
            f"rebalance {request.request_id} of {args.topology!r} requested; "
            "`sr3 status` shows its progress"
        )
    return 0
