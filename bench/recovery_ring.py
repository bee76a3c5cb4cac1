"""The ring side of bench/recovery.py: a loopback lab and one timed recovery.

A lab of ring nodes with kill and restart, the holders a run SIGKILLs for each
structure, and :func:`recover_once`, which recovers one owner and returns its row
(times, CPU seconds, timeline). bench/recovery_netns.py runs the same recovery
behind a shaped link.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cpu import own_cpu_s, pids_cpu_s
from sr3.recovery import Recoverer, RecoveryContext
from sr3_cli.cluster import Cluster
from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab


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
