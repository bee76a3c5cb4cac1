"""Stragglers: which task falls behind its peers, and what a straggler event records.

A task is a straggler when it stays silent (no heartbeat answer, no message)
for ``sr3.straggler.lag.s`` while most of its peers do not, or when it has
``sr3.straggler.queue.min`` inputs queued and either processes below
``sr3.straggler.rate.ratio`` times its peers' median rate or holds a queue over
``1 / ratio`` times theirs. A task alone in its component has no peers: its
silence (while most other tasks answer) decides, or a queue it processed none
of since the last check. The
policy (``sr3.straggler.policy``) says what follows: ``off``, ``duplicate``
(StreamScope's: a copy started from the last committed checkpoint races it) or
``restart`` (it is killed, as a crash). The local cluster applies it
(:mod:`storm_bridge.cluster.duplicates`); :func:`verdict` is pure.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sr3.config_engine import CheckpointConfig

__all__ = [
    "StragglerEvent",
    "StragglerPolicy",
    "StragglerSettings",
    "TaskSample",
    "verdict",
]


class StragglerPolicy(enum.Enum):
    """What the cluster does with a straggler (``sr3.straggler.policy``)."""

    OFF = "off"
    DUPLICATE = "duplicate"
    RESTART = "restart"


@dataclass(frozen=True)
class StragglerSettings:
    """The ``sr3.straggler.*`` keys of a topology.

    Attributes:
        policy: What happens to a straggler (default off).
        lag_s: Silence that makes a task a straggler (default 5 s).
        rate_ratio: Fraction of the peers' median rate below which a task with
            a queue is a straggler (default 0.2).
        queue_min: Queued inputs before rate and queue count (default 1000).
        check_s: Time between checks (default 1 s).
    """

    policy: StragglerPolicy = StragglerPolicy.OFF
    lag_s: float = 5.0
    rate_ratio: float = 0.2
    queue_min: int = 1000
    check_s: float = 1.0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> StragglerSettings:
        """Read them from a topology's Storm conf.

        Raises:
            ConfigError: a value is not accepted (an unknown policy names the
                accepted ones).
        """
        section = CheckpointConfig.from_mapping(conf)
        return cls(
            policy=StragglerPolicy(section.straggler_policy),
            lag_s=section.straggler_lag_s,
            rate_ratio=section.straggler_rate_ratio,
            queue_min=section.straggler_queue_min,
            check_s=section.straggler_check_s,
        )


@dataclass(frozen=True)
class TaskSample:
    """What one check saw of one task.

    Attributes:
        task_id: Storm task id.
        silent_s: Time since the task last said anything.
        queue: Inputs sent to it and not yet acked or failed, plus those still
            waiting to be written to its stdin.
        rate: Inputs it acked or failed per second since the last check.
    """

    task_id: int
    silent_s: float
    queue: int
    rate: float


def verdict(
    sample: TaskSample,
    peers: Sequence[TaskSample],
    settings: StragglerSettings,
    others: Sequence[TaskSample] = (),
) -> str | None:
    """Return why ``sample``'s task is a straggler, or None when it is not.

    Args:
        sample: The task checked.
        peers: The other tasks of its component (none for a task alone).
        settings: The thresholds.
        others: Every other task of the topology: a task alone is compared
            with them for silence.
    """
    if sample.silent_s > settings.lag_s:
        # when its peers (or, alone, the other tasks) are as silent, the
        # machine is overloaded, not the task
        reference = peers or others
        silent = [p.silent_s for p in reference]
        if not silent or statistics.median(silent) < settings.lag_s:
            return (
                f"silent for {sample.silent_s:.1f} s, over sr3.straggler.lag.s="
                f"{settings.lag_s:g}"
            )
        return None
    if sample.queue < settings.queue_min:
        return None
    if not peers:
        # a task alone catching up after a burst has a queue too: only one
        # that processed nothing since the last check is stuck
        if sample.rate > 0:
            return None
        return (
            f"{sample.queue} inputs queued, over sr3.straggler.queue.min="
            f"{settings.queue_min}, and none processed (no peers to compare with)"
        )
    ratio = settings.rate_ratio
    peer_rate = statistics.median(p.rate for p in peers)
    if peer_rate > 0 and sample.rate < ratio * peer_rate:
        return (
            f"{sample.rate:.0f} inputs/s with {sample.queue} queued, below "
            f"{ratio:g} x its peers' median {peer_rate:.0f}/s "
            "(sr3.straggler.rate.ratio)"
        )
    peer_queue = statistics.median(p.queue for p in peers)
    if sample.queue * ratio > peer_queue:
        return (
            f"{sample.queue} inputs queued, over 1/{ratio:g} x its peers' "
            f"median {peer_queue:.0f} (sr3.straggler.rate.ratio)"
        )
    return None


@dataclass
class StragglerEvent:
    """One straggler the cluster acted on, for the run report.

    Attributes:
        component: Its component id.
        task: Its index among the component's tasks (as ``--kill`` names it).
        task_id: Its Storm task id.
        policy: ``duplicate`` or ``restart``.
        reason: Why it was found a straggler (:func:`verdict`).
        detected_at: Clock reading of the detection.
        detected_unix: Wall-clock time of the detection.
        winner: ``original`` or ``duplicate`` (the copy that reached the live
            position first), ``restart``, or ``aborted`` (a failure ended the
            race: the rollback took over); None while undecided.
        decided_at: Clock reading when the winner was known (or the restart
            was made).
        resumed_unix: Wall-clock time of the first epoch committed after that.
        resumed_epoch: That epoch's number (processing resumed with it);
            the report's ``resumed_after_s`` is detection to that commit.
        replayed: Inputs the duplicate was fed from the input log.
    """

    component: str
    task: int
    task_id: int
    policy: StragglerPolicy
    reason: str
    detected_at: float
    detected_unix: float
    winner: str | None = None
    decided_at: float | None = None
    resumed_unix: float | None = None
    resumed_epoch: int | None = None
    replayed: int = 0

    def to_dict(self, started: float) -> dict[str, Any]:
        """Return the ``--json`` report's entry (times from ``started`` on)."""
        takeover = None
        if self.decided_at is not None:
            takeover = round(self.decided_at - self.detected_at, 4)
        return {
            "component": self.component,
            "task": self.task,
            "task_id": self.task_id,
            "policy": self.policy.value,
            "reason": self.reason,
            "detected_at_s": round(self.detected_at - started, 3),
            "detected_unix": round(self.detected_unix, 3),
            "winner": self.winner,
            "takeover_s": takeover,
            "resumed_unix": (
                None if self.resumed_unix is None else round(self.resumed_unix, 3)
            ),
            "resumed_epoch": self.resumed_epoch,
            "resumed_after_s": (
                None
                if self.resumed_unix is None
                else round(self.resumed_unix - self.detected_unix, 3)
            ),
            "replayed": self.replayed,
        }
