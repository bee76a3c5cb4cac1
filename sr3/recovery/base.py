"""What every recovery structure shares: phases, timeline, context, jobs, assignment.

A recovery runs in phases guarded by :class:`RecoveryLifecycle`; each phase is a
span of the timeline that the CLI and the benchmark print. A structure
(:class:`RecoveryStrategy`) moves one :class:`TransferJob`: a set of shards into
the job's :class:`~sr3.recovery.pieces.Assembly`. A holder failing never raises out
of a structure: it is recorded in the job, and the caller re-plans what is missing.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sr3.client import ClientPool
from sr3.config import NodeConfig, RecoveryConfig
from sr3.errors import RecoveryError
from sr3.manifest import ShardMeta
from sr3.ports import ManifestStore, NodeInfo
from sr3.recovery.pieces import Assembly
from sr3.ring import ring_hash

__all__ = [
    "EventHook",
    "RecoveryContext",
    "RecoveryLifecycle",
    "RecoveryPhase",
    "RecoveryStrategy",
    "Span",
    "TransferJob",
    "assign_covering",
    "assign_least_loaded",
    "covering_holders",
    "ring_order",
]

logger = logging.getLogger(__name__)

EventHook = Callable[[str, Mapping[str, Any]], None]
MembersFn = Callable[[], Mapping[str, NodeInfo]]


class RecoveryPhase(enum.Enum):
    """Phases of one recovery.

    Transitions::

        PENDING -> PLANNING -> TRANSFERRING -> INSTALLING -> RESUMED
                                  |    ^
                                  v    |
                               REPLANNING
        any phase but RESUMED -> FAILED
    """

    PENDING = "pending"
    PLANNING = "plan"
    TRANSFERRING = "transfer"
    REPLANNING = "replan"
    INSTALLING = "install"
    RESUMED = "resume"
    FAILED = "failed"


_ALLOWED: dict[RecoveryPhase, frozenset[RecoveryPhase]] = {
    RecoveryPhase.PENDING: frozenset({RecoveryPhase.PLANNING}),
    RecoveryPhase.PLANNING: frozenset({RecoveryPhase.TRANSFERRING}),
    RecoveryPhase.TRANSFERRING: frozenset(
        {RecoveryPhase.REPLANNING, RecoveryPhase.INSTALLING}
    ),
    RecoveryPhase.REPLANNING: frozenset({RecoveryPhase.TRANSFERRING}),
    RecoveryPhase.INSTALLING: frozenset({RecoveryPhase.RESUMED}),
    RecoveryPhase.RESUMED: frozenset(),
    RecoveryPhase.FAILED: frozenset(),
}


@dataclass(frozen=True)
class Span:
    """One phase of the timeline, in seconds since the recovery started.

    Attributes:
        phase: The phase's name (``plan``, ``transfer``, ``replan``, ``install``,
            ``resume``).
        start_s: When it began.
        end_s: When it ended.
        detail: What it did (mechanism, shards, bytes).
    """

    phase: str
    start_s: float
    end_s: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict."""
        return {
            "phase": self.phase,
            "start_s": round(self.start_s, 6),
            "end_s": round(self.end_s, 6),
            "seconds": round(self.end_s - self.start_s, 6),
            "detail": self.detail,
        }


class RecoveryLifecycle:
    """Moves a recovery through its phases and records the timeline.

    Args:
        clock: Monotonic clock in seconds (injectable for tests).

    Raises:
        RecoveryError: from :meth:`move`, on a transition the phase diagram of
            :class:`RecoveryPhase` does not allow.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.started = clock()
        self.phase = RecoveryPhase.PENDING
        self._since = 0.0
        self._detail = ""
        self.timeline: list[Span] = []

    def now(self) -> float:
        """Seconds since the recovery started."""
        return self._clock() - self.started

    def move(self, phase: RecoveryPhase, detail: str = "") -> None:
        """Close the current phase's span and enter ``phase``.

        Raises:
            RecoveryError: the transition is not allowed.
        """
        if phase is not RecoveryPhase.FAILED and phase not in _ALLOWED[self.phase]:
            msg = (
                f"recovery cannot move from {self.phase.value} to {phase.value}; "
                "this is a bug in the recovery driver"
            )
            raise RecoveryError(msg)
        if phase is RecoveryPhase.FAILED and self.phase is RecoveryPhase.RESUMED:
            msg = "a resumed recovery cannot fail afterwards"
            raise RecoveryError(msg)
        now = self.now()
        if self.phase is not RecoveryPhase.PENDING:
            self.timeline.append(Span(self.phase.value, self._since, now, self._detail))
        self.phase, self._since, self._detail = phase, now, detail

    def annotate(self, detail: str) -> None:
        """Replace the detail of the current phase."""
        self._detail = detail

    def finish(self) -> None:
        """Close the final phase's span (RESUMED or FAILED)."""
        now = self.now()
        self.timeline.append(Span(self.phase.value, self._since, now, self._detail))
        self._since = now


@dataclass(frozen=True)
class RecoveryContext:
    """What a recovering process R needs to reach the ring.

    Attributes:
        manifests: Manifest store (ZooKeeper in production).
        members: Returns the live ring nodes.
        pool: Client connections to ring nodes.
        node_config: Secret, frame bound and timeouts of ring connections.
        recovery: Mechanism, tree fan-out, latency target, lazy install.
        parallel: Shards star recovery fetches at once (default 8).
        max_rounds: Re-plans after the first transfer before giving up (default 5).
        retry_backoff_s: Wait before the second re-plan, doubling after (default
            0.5 s): time for repair to re-replicate a failed holder's shards.
    """

    manifests: ManifestStore
    members: MembersFn
    pool: ClientPool
    node_config: NodeConfig
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    parallel: int = 8
    max_rounds: int = 5
    retry_backoff_s: float = 0.5


@dataclass
class TransferJob:
    """One round of a recovery: shards to move into an assembly.

    Attributes:
        owner: The owner being recovered.
        shards: Shards to move, in chain order.
        live: Live ring nodes when the round was planned.
        assembly: Where delivered cells go.
        failed: Nodes found dead or failing (skipped by later rounds).
        served_by: Node id to bytes it delivered.
        structure: Who connects to whom, for the report (filled by the structure).
        on_event: Optional hook called on ``plan``, ``data`` and ``lost`` events.
    """

    owner: str
    shards: list[ShardMeta]
    live: dict[str, NodeInfo]
    assembly: Assembly
    failed: set[str] = field(default_factory=set)
    served_by: dict[str, int] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)
    on_event: EventHook | None = None
    corrupt: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def emit(self, kind: str, **info: Any) -> None:
        """Call the event hook, if any."""
        if self.on_event is not None:
            self.on_event(kind, info)

    def delivered(self, node_id: str, nbytes: int) -> None:
        """Count ``nbytes`` delivered by ``node_id`` and report a ``data`` event."""
        with self._lock:
            self.served_by[node_id] = self.served_by.get(node_id, 0) + nbytes
        self.emit("data", node=node_id, bytes=nbytes)

    def found_corrupt(self, node_id: str, shard_id: str) -> None:
        """Record that ``node_id`` served a corrupt copy of ``shard_id``.

        The recoverer reports it to that node after the round, so the node
        quarantines the replica and repair copies a good one back.
        """
        with self._lock:
            self.corrupt.append((node_id, shard_id))
        self.emit("corrupt", node=node_id, shard=shard_id)

    def lost(self, node_id: str, error: str) -> None:
        """Record that ``node_id`` failed during the round."""
        with self._lock:
            self.failed.add(node_id)
        self.emit("lost", node=node_id, error=error)

    def lost_frame(self, frame: Mapping[str, Any]) -> None:
        """Handle a relay's ``lost`` frame: a failed node, or an unreadable shard."""
        node, error = str(frame.get("node")), str(frame.get("error"))
        if frame.get("shard") is not None:
            logger.warning(
                "relay: %s could not send %s: %s", node, frame["shard"], error
            )
            self.found_corrupt(node, str(frame["shard"]))
            return
        logger.warning("relay: node %s failed mid-transfer: %s", node, error)
        self.lost(node, error)

    def usable(self) -> dict[str, NodeInfo]:
        """Return the live nodes not known to have failed."""
        with self._lock:
            return {k: v for k, v in self.live.items() if k not in self.failed}


def ring_order(node_ids: Sequence[str]) -> list[str]:
    """Return node ids in ring order: by the ring position of the node's id."""
    return sorted(node_ids, key=lambda n: (ring_hash(n), n))


def assign_least_loaded(
    shards: Sequence[ShardMeta], usable: Mapping[str, NodeInfo]
) -> tuple[dict[str, list[ShardMeta]], list[ShardMeta]]:
    """Give each shard to its least-loaded usable holder (by bytes assigned).

    Shards are taken largest first (ties in chain order), so loads even out;
    a tie between holders goes to the earlier one in the shard's holder list.
    Deterministic for fixed inputs.

    Returns:
        ``(node id -> its shards in chain order, shards without a usable holder)``.
    """
    order = {s.shard_id: i for i, s in enumerate(shards)}
    load: dict[str, int] = {}
    assigned: dict[str, list[ShardMeta]] = {}
    orphans: list[ShardMeta] = []
    for shard in sorted(shards, key=lambda s: (-s.size, order[s.shard_id])):
        candidates = [h for h in shard.holders if h in usable]
        if not candidates:
            orphans.append(shard)
            continue
        best = min(candidates, key=lambda h: load.get(h, 0))
        load[best] = load.get(best, 0) + shard.size
        assigned.setdefault(best, []).append(shard)
    for node_shards in assigned.values():
        node_shards.sort(key=lambda s: order[s.shard_id])
    orphans.sort(key=lambda s: order[s.shard_id])
    return assigned, orphans


def covering_holders(
    shards: Sequence[ShardMeta], usable: Mapping[str, object]
) -> list[str]:
    """Return few usable holders that together hold every shard that has one.

    Greedy set cover by bytes: each step takes the holder of the most bytes not
    covered yet, ties going to the earlier node in ring order. Relay structures
    use only these holders, so a byte crosses fewer hops (with r=3 over 5 nodes,
    2 or 3 holders usually cover everything). Deterministic for fixed inputs.

    Returns:
        The chosen node ids, in ring order.
    """
    rank = {n: i for i, n in enumerate(ring_order(list(usable)))}
    uncovered = [s for s in shards if any(h in usable for h in s.holders)]
    chosen: list[str] = []
    while uncovered:
        gain: dict[str, int] = {}
        for shard in uncovered:
            for holder in set(shard.holders):
                if holder in usable:
                    gain[holder] = gain.get(holder, 0) + max(shard.size, 1)
        best = min(gain, key=lambda n: (-gain[n], rank[n]))
        chosen.append(best)
        uncovered = [s for s in uncovered if best not in s.holders]
    return ring_order(chosen)


def assign_covering(
    shards: Sequence[ShardMeta], usable: Mapping[str, NodeInfo]
) -> tuple[dict[str, list[ShardMeta]], list[ShardMeta]]:
    """Assign shards as :func:`assign_least_loaded` does, among covering holders only.

    The holders are :func:`covering_holders`; each shard goes to the least-loaded
    of them that holds it. Line and tree recovery use this: every holder they
    include adds a hop to the bytes passing through it.

    Returns:
        ``(node id -> its shards in chain order, shards without a usable holder)``.
    """
    chosen = covering_holders(shards, usable)
    return assign_least_loaded(shards, {n: usable[n] for n in chosen})


class RecoveryStrategy(ABC):
    """A recovery structure: how shards travel from holders to R.

    Subclasses implement :meth:`transfer`; they must not raise for a holder that
    fails (record it with :meth:`TransferJob.lost`), only for errors of R itself.

    Args:
        context: How to reach the ring.
    """

    name: ClassVar[str] = ""

    def __init__(self, context: RecoveryContext) -> None:
        self.context = context

    @abstractmethod
    def transfer(self, job: TransferJob) -> None:
        """Move the job's shards into ``job.assembly`` as far as holders allow.

        Raises:
            RecoveryError: R itself cannot go on (not raised for holder failures).
        """

    def describe(self, job: TransferJob) -> str:
        """Return a one-line description of the structure used for ``job``."""
        return f"{self.name} over {len(job.structure.get('nodes', []))} holders"
