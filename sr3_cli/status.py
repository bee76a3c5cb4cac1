"""``sr3 status``: members, shards and bytes per node, and replication health."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from sr3.errors import CodecError
from sr3.repair import replication_health
from sr3_cli import lab_netns
from sr3_cli.cluster import Cluster, cluster_config, open_cluster
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.lab_kafka import kafka_daemons, kafka_status
from sr3_cli.lab_metrics import endpoints, prometheus_status, refresh_node_targets
from sr3_cli.lab_spark import spark_daemons, spark_status
from sr3_cli.lab_storm import storm_daemons, storm_status
from sr3_cli.output import emit_json, format_bytes, table
from sr3_cli.rebalance_cmd import running_topologies
from zk.rebalances import ZkRebalanceStore

__all__ = ["collect_status", "run_status"]

logger = logging.getLogger(__name__)


def lab_daemons(lab: Lab) -> list[str]:
    """Return the names of what runs in the lab: ring nodes and daemons."""
    return [
        *lab.nodes,
        *storm_daemons(lab),
        *spark_daemons(lab),
        *kafka_daemons(lab),
    ]


def collect_status(cluster: Cluster, lab: Lab | None = None) -> dict[str, Any]:
    """Return the status object that ``sr3 status --json`` prints."""
    live = cluster.membership.members()
    r = cluster.config.ring.replication_factor
    nodes: dict[str, dict[str, Any]] = {}
    for node_id, info in live.items():
        nodes[node_id] = {
            "id": node_id,
            "address": info.address,
            "zone": info.zone,
            "capacity": info.capacity,
            "alive": True,
            "shards": 0,
            "bytes": 0,
        }
    if lab is not None:
        for node_id, lab_node in lab.nodes.items():
            where = lab_netns.node_placement(lab, node_id)
            host = where.address if where else "127.0.0.1"
            nodes.setdefault(
                node_id,
                {
                    "id": node_id,
                    "address": f"{host}:{lab_node.port}" if lab_node.port else "",
                    "zone": lab_node.zone,
                    "capacity": None,
                    "alive": False,
                    "shards": 0,
                    "bytes": 0,
                },
            )
    all_shards = {}
    owners = cluster.manifests.owners()
    unreadable = []
    for owner in owners:
        try:
            all_shards.update(cluster.manifests.shards(owner))
        except CodecError as exc:  # one damaged record must not hide the ring
            logger.warning("%s", exc)
            unreadable.append(owner)
    for meta in all_shards.values():
        for holder in meta.holders:
            entry = nodes.setdefault(
                holder,
                {
                    "id": holder,
                    "address": "",
                    "zone": None,
                    "capacity": None,
                    "alive": False,
                    "shards": 0,
                    "bytes": 0,
                },
            )
            entry["shards"] += 1
            entry["bytes"] += meta.size
    under, lost = replication_health(all_shards, live, r)
    metrics_urls = cluster.membership.metrics_urls()
    if lab is not None and lab.prometheus is not None:
        refresh_node_targets(lab, metrics_urls)  # nodes restarted on new ports
    rebalances = ZkRebalanceStore(cluster.session)
    runs = {name: rebalances.live(name) for name in running_topologies(cluster)}
    return {
        "nodes": sorted(nodes.values(), key=lambda n: n["id"]),
        "under_replicated": under,
        "lost": lost,
        "shards": len(all_shards),
        "owners": len(owners),
        "unreadable_owners": unreadable,
        "replication_factor": r,
        "live_nodes": len(live),
        # the netns lab's hosts (`sr3 lab up --netns`), else null
        "hosts": (
            lab_netns.hosts_status(lab, lab_daemons(lab)) if lab is not None else None
        ),
        # the lab's Apache Storm cluster (`sr3 lab up --storm`), else null
        "storm": storm_status(lab) if lab is not None else None,
        # the lab's Spark master and workers (`sr3 lab up --spark`), else null
        "spark": spark_status(lab) if lab is not None else None,
        # the lab's Kafka broker (`sr3 lab up --kafka`), else null
        "kafka": kafka_status(lab) if lab is not None else None,
        # every Prometheus endpoint: ring nodes, then the lab's running topologies
        "metrics": endpoints(metrics_urls, lab.root if lab is not None else None),
        # the lab's Prometheus server (`sr3 lab up --metrics`), else null
        "prometheus": prometheus_status(lab) if lab is not None else None,
        # running `sr3 run`s: task ownership per stateful component, rebalance
        "runs": {name: run for name, run in runs.items() if run is not None},
    }


def run_status(args: argparse.Namespace) -> int:
    """Print ring status; exit 0."""
    config = cluster_config(args)
    lab_dir = resolve_lab_dir(args.lab) if not args.zk else None
    lab = Lab.load(lab_dir) if lab_dir else None
    with open_cluster(config, create=False) as cluster:
        status = collect_status(cluster, lab)
    if args.json:
        emit_json(status)
        return 0
    rows = [
        [
            n["id"],
            n["address"],
            n["zone"] or "-",
            "yes" if n["alive"] else "NO",
            n["shards"],
            format_bytes(n["bytes"]),
        ]
        for n in status["nodes"]
    ]
    print(table(["node", "address", "zone", "alive", "shards", "bytes"], rows))
    print(
        f"\n{status['owners']} owners, {status['shards']} shards, "
        f"r={status['replication_factor']}, {status['live_nodes']} live nodes: "
        f"{status['under_replicated']} under-replicated, {status['lost']} lost"
    )
    if status["unreadable_owners"]:
        names = ", ".join(repr(o) for o in status["unreadable_owners"])
        print(f"owners whose shard records cannot be read (not counted): {names}")
    if status["hosts"]:
        _print_hosts(status["hosts"])
    if status["storm"] is not None:
        _print_storm(status["storm"])
    kafka = status["kafka"]
    if kafka is not None:
        pids = kafka["pid"] if isinstance(kafka["pid"], list) else [kafka["pid"]]
        label = "pid" if len(pids) == 1 else "pids"
        shown = ", ".join(str(p) for p in pids)
        state = f"{label} {shown}" if kafka["running"] else "NOT RUNNING"
        print(f"\nApache Kafka {kafka['version']}: {kafka['bootstrap']} ({state})")
    _print_runs(status["runs"])
    _print_metrics(status)
    return 0


def _print_runs(runs: dict[str, Any]) -> None:
    """Print each running topology's stateful tasks and its rebalance, if any."""
    for name, run in sorted(runs.items()):
        on_spark = run.get("engine") == "spark"
        engine = ", on Spark: rebalances restart" if on_spark else ""
        print(f"\nrunning topology {name} (sr3 run pid {run.get('pid')}{engine}):")
        for component, tasks in sorted(dict(run.get("ownership") or {}).items()):
            info = dict(run["components"]).get(component, {})
            print(f"  {component}: {len(tasks)} of max {info.get('max')} tasks")
            for task in tasks:
                held = ", tuples held" if task["held"] else ""
                owns = (
                    f"keys whose fields hash mod {task['of']} == {task['index']}"
                    if task.get("key_groups") is None
                    else f"key groups {task['key_groups'] or 'none'}"
                )
                print(
                    f"    task {task['task']} index {task['index']}/{task['of']} "
                    f"owner {task['owner']} ({task['state']}, {task['processed']} "
                    f"processed{held}): {owns}"
                )
        current = run.get("rebalance")
        if current:
            moves = ", ".join(
                f"{c} {t['from']}->{t['to']}" for c, t in current["targets"].items()
            )
            print(
                f"  rebalance {current['id']} in progress: {moves} "
                f"({current['phase']}, epoch {current['epoch']})"
            )


def _print_hosts(hosts: list[dict[str, Any]]) -> None:
    """Print the netns lab's hosts: address, namespace, what runs there."""
    rows = [
        [h["host"], h["address"], h["namespace"] if h["up"] else "GONE",
         ", ".join(h["roles"]) or "-"]
        for h in hosts
    ]  # fmt: skip
    print(f"\nhosts (links {hosts[0]['shape']}):")
    print(table(["host", "address", "namespace", "runs"], rows))
    undelayed = [h["host"] for h in hosts if h.get("delay_held") is False]
    if undelayed:
        print(
            f"links of {', '.join(undelayed)} NOT DELAYED: their delay process is "
            "gone (packets pass undelayed); `sudo sr3 lab up --netns` with the "
            "lab's --hosts and --netem starts it again"
        )


def _print_metrics(status: dict[str, Any]) -> None:
    """Print the Prometheus server (if any) and every metrics endpoint."""
    server = status["prometheus"]
    if server is not None:
        state = f"pid {server['pid']}" if server["running"] else "NOT RUNNING"
        print(f"\nPrometheus: {server['url']} ({state})")
    if status["metrics"]:
        print("\nmetrics endpoints:")
        for endpoint in status["metrics"]:
            print(f"  {endpoint['job']}: {endpoint['url']}")


def _print_storm(storm: dict[str, Any]) -> None:
    """Print the lab's Storm cluster: Nimbus, supervisors and slots, topologies."""
    leader = "leader" if storm["leader"] else "NOT LEADING"
    pid = storm["nimbus_pid"] or "not running"
    print(
        f"\nApache Storm {storm['version']}: Nimbus {storm['nimbus']} "
        f"({leader}, pid {pid}), UI: {storm['ui'] or 'none'}"
    )
    if storm["error"]:
        print(f"  {storm['error']}")
    for sup in storm["supervisors"]:
        print(
            f"  supervisor {sup['supervisor_id']}: {sup['used_slots']} of "
            f"{sup['slots']} slots used, {sup['free_slots']} free"
        )
    down = [p["name"] for p in storm["supervisor_processes"] if p["pid"] is None]
    if down:
        print(f"  not running: {', '.join(down)}")
    for topo in storm["topologies"]:
        print(
            f"  topology {topo['name']} ({topo['status']}): {topo['workers']} "
            f"workers, {topo['executors']} executors, up {topo['uptime_s']} s"
        )
    if not storm["topologies"]:
        print("  no topologies")
