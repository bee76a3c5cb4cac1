"""``storm rebalance`` through Nimbus's Thrift API, for ``sr3 rebalance`` on real Storm.

Storm fixes a component's task count (``topology.tasks``) at submission; a
rebalance changes how many executors (threads, each with its Python
subprocess per task) run those tasks, and how many workers. So the state of
a stateful component never moves between tasks here: each task keeps its own
owner in the ring. Storm kills the workers whose executors move and starts new
ones; in native mode that is a task restart like any other, and the
topology rolls back to its last committed epoch and goes on exactly once
(``docs/rebalance.md``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from streamparse.thrift import RebalanceOptions
from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from storm_bridge.errors import StormBridgeError
from storm_bridge.sparse.submit import NimbusSession

__all__ = [
    "ComponentLayout",
    "StormRebalanceError",
    "check_storm_request",
    "layout",
    "rebalance_on_storm",
]

_POLL_S: Final = 0.5
#: Storm's own components (ackers, metrics consumers, the system bolt).
_SYSTEM_PREFIX: Final = "__"


class StormRebalanceError(StormBridgeError):
    """A rebalance Storm cannot do, or Nimbus refused or did not finish."""


@dataclass(frozen=True)
class ComponentLayout:
    """How Storm runs one component now.

    Attributes:
        executors: Executors (threads) running the component's tasks.
        tasks: The component's task count, fixed at submission
            (``topology.tasks``, else its parallelism).
        uptimes_s: Each executor's uptime from its heartbeats (0: none yet).
    """

    executors: int
    tasks: int
    uptimes_s: tuple[int, ...] = ()


def layout(info: Any) -> dict[str, ComponentLayout]:
    """Return each user component's executors and tasks from a ``TopologyInfo``."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    uptimes: dict[str, list[int]] = {}
    for summary in info.executors or []:
        component = str(summary.component_id)
        if component.startswith(_SYSTEM_PREFIX):
            continue
        executor = summary.executor_info
        ranges.setdefault(component, []).append(
            (int(executor.task_start), int(executor.task_end))
        )
        uptimes.setdefault(component, []).append(int(summary.uptime_secs or 0))
    return {
        c: ComponentLayout(
            len(r), sum(end - start + 1 for start, end in r), tuple(uptimes[c])
        )
        for c, r in ranges.items()
    }


def check_storm_request(
    topology: str, components: Mapping[str, ComponentLayout], targets: Mapping[str, int]
) -> None:
    """Refuse what Storm cannot do, naming the limit and the fix.

    Raises:
        StormRebalanceError: an unknown component, or more executors than the
            component has tasks.
    """
    for component, count in sorted(targets.items()):
        found = components.get(component)
        if found is None:
            known = ", ".join(sorted(components)) or "none"
            msg = (
                f"topology {topology!r} on Storm has no component {component!r} "
                f"(components: {known})"
            )
            raise StormRebalanceError(msg)
        if count > found.tasks:
            msg = (
                f"{component}={count}: on Storm a component runs at most one executor "
                f"per task, and {component!r} of {topology!r} has {found.tasks} tasks "
                f"(its topology.tasks, fixed at submission); give at most "
                f"{component}={found.tasks}, or submit it again with a larger "
                "topology.tasks in the component's config"
            )
            raise StormRebalanceError(msg)


def _done(
    components: Mapping[str, ComponentLayout],
    targets: Mapping[str, int],
    status: str,
    since_s: float,
) -> bool:
    """Whether Storm runs the new layout: new executors, started after the request.

    Nimbus shows the new assignment at once, with no heartbeat (uptime 0) from
    its executors; they run it once their workers restarted and heartbeat, with
    an uptime counted from that restart.
    """
    return status == "ACTIVE" and all(
        c in components
        and components[c].executors == n
        and all(0 < up <= since_s + 1 for up in components[c].uptimes_s)
        for c, n in targets.items()
    )


def rebalance_on_storm(  # noqa: PLR0913 (storm rebalance's options)
    session: NimbusSession,
    topology: str,
    targets: Mapping[str, int],
    *,
    workers: int | None,
    wait_s: float,
    storm_wait_s: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Rebalance a running topology as ``storm rebalance`` does; wait for it.

    Args:
        session: Nimbus.
        topology: The topology name.
        targets: New executor counts by component.
        workers: New worker count (None: unchanged).
        wait_s: How long to wait for Storm to run the new layout (0: return
            once Nimbus took the request).
        storm_wait_s: Storm's own wait between deactivating the topology and
            moving its executors (``storm rebalance -w``); native mode rolls
            back what was in flight, so none is needed.
        clock: Monotonic clock.

    Returns:
        ``targets`` as ``{component: {"from": n, "to": m}}``, the workers asked
        for, ``seconds`` until Storm ran the new layout (None if not waited for)
        and ``done``.

    Raises:
        StormRebalanceError: the topology does not run, a bad request, Nimbus
            refused it, or the new layout did not run within ``wait_s``.
        NimbusUnreachableError: no Nimbus answers.
    """
    ref = session.topologies().get(topology)
    if ref is None:
        running = ", ".join(sorted(session.topologies())) or "none"
        msg = (
            f"topology {topology!r} does not run on Nimbus {session.nimbus} "
            f"(running: {running})"
        )
        raise StormRebalanceError(msg)
    before = layout(session.topology_info(ref.topology_id))
    check_storm_request(topology, before, targets)
    if workers is not None and workers < 1:
        msg = f"-n {workers}: a topology needs at least one worker"
        raise StormRebalanceError(msg)
    options = RebalanceOptions(
        wait_secs=storm_wait_s,
        num_workers=workers,
        num_executors=dict(targets) or None,
    )
    started = clock()
    try:
        with session.client() as client:
            client.rebalance(name=topology, options=options)
    except TException as exc:
        if isinstance(exc, TTransportException):
            raise
        reason = getattr(exc, "msg", None) or str(exc)
        msg = f"Nimbus {session.nimbus} refused to rebalance {topology!r}: {reason}"
        raise StormRebalanceError(msg) from exc
    result: dict[str, Any] = {
        "engine": "apache-storm",
        "topology": topology,
        "targets": {
            c: {"from": before[c].executors, "to": n}
            for c, n in sorted(targets.items())
        },
        "workers": workers,
        "seconds": None,
        "done": False,
    }
    if wait_s <= 0:
        return result
    deadline = started + wait_s
    while clock() < deadline:
        time.sleep(_POLL_S)
        ref = session.topologies().get(topology)
        if ref is None:
            msg = f"topology {topology!r} stopped running during its rebalance"
            raise StormRebalanceError(msg)
        now = layout(session.topology_info(ref.topology_id))
        if _done(now, targets, ref.status, clock() - started):
            result.update(seconds=round(clock() - started, 3), done=True)
            return result
    msg = (
        f"Storm did not run {topology!r} at {dict(targets)} within -w {wait_s:g} s; "
        f"it goes on: `sr3 status` or Nimbus's topology info show it"
    )
    raise StormRebalanceError(msg)
