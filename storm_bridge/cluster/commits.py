"""Global commits of the local cluster's checkpoints and their settings.

Epoch ``e`` commits once every spout task and every stateful task reported it:
:class:`Commits` records it through the :class:`CheckpointHooks` (ZooKeeper in
production) under the owner names of :func:`task_owners` and keeps its
:class:`~storm_bridge.cluster.epochs.EpochStats`. A commit the hooks refuse
drops the epoch; the coordinator opens a later one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from backend.owners import owner_name
from sr3.errors import ConfigError
from storm_bridge.cluster.epochs import EpochStats, OpenEpoch
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.errors import StormBridgeError
from topology_api.topology import LoadedTopology

__all__ = ["CheckpointHooks", "CheckpointSettings", "Commits", "task_owners"]

logger = logging.getLogger(__name__)


class CheckpointHooks(Protocol):
    """Where the coordinator records commits (ZooKeeper in production)."""

    def commit(
        self,
        epoch: int,
        offsets: Mapping[str, Any],
        owners: list[str],
        key_groups: Mapping[str, Any] | None = None,
    ) -> None:
        """Record epoch ``epoch`` as globally committed.

        ``key_groups`` (key-groups routing only; never passed otherwise): the
        key-group tables of the epoch, ``{component: encoded table}``.
        """


@dataclass(frozen=True)
class CheckpointSettings:
    """How the cluster checkpoints.

    Attributes:
        hooks: Records commits.
        interval_s: Time between the commit of an epoch and the opening of the
            next (``sr3.checkpoint.interval.s``, default 1).
        first_epoch: Number of the first epoch this run opens; keep it above
            every epoch published before.
        timeout_s: An epoch still open after this long is abandoned (held
            tuples are released) and a later one opened
            (``sr3.checkpoint.timeout.s``, default 60).
        start_tables: The key-group tables of the committed epoch the run
            starts from (``{component: encoded table}``; key-groups routing
            only, see :mod:`storm_bridge.cluster.keygroup_routing`).

    Raises:
        ConfigError: a duration is not positive or the first epoch is below 1.
    """

    hooks: CheckpointHooks
    interval_s: float = 1.0
    first_epoch: int = 1
    timeout_s: float = 60.0
    start_tables: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = {
            "sr3.checkpoint.interval.s": self.interval_s > 0,
            "sr3.checkpoint.timeout.s": self.timeout_s > 0,
        }
        for key, ok in checks.items():
            if not ok:
                msg = f"{key} must be > 0 seconds; use e.g. 1"
                raise ConfigError(msg)
        if self.first_epoch < 1:
            msg = f"first epoch {self.first_epoch} is invalid; epochs start at 1"
            raise ConfigError(msg)


def task_owners(
    topology: LoadedTopology,
    tasks: Mapping[int, TaskRuntime],
    component_tasks: Callable[[str], list[int]],
) -> tuple[dict[int, str], dict[int, int]]:
    """Return each task's owner name in commit records and its component index.

    A spout task's owner is ``component/index`` (its offset's key), a bolt
    task's ``topology/component/index`` (its snapshot's owner).
    """
    owners: dict[int, str] = {}
    index: dict[int, int] = {}
    for task_id, rt in tasks.items():
        comp = rt.component.name
        index[task_id] = component_tasks(comp).index(task_id)
        if rt.is_spout:
            owners[task_id] = f"{comp}/{index[task_id]}"
        else:
            owners[task_id] = owner_name(topology.name, comp, index[task_id])
    return owners, index


class Commits:
    """Records complete epochs as globally committed and keeps their stats.

    Args:
        hooks: Records commits.
        clock: Monotonic clock in seconds.
    """

    def __init__(self, hooks: CheckpointHooks, clock: Callable[[], float]) -> None:
        self._hooks = hooks
        self._clock = clock
        #: Stats of every epoch committed, oldest first.
        self.committed: list[EpochStats] = []

    def commit(
        self,
        epoch: OpenEpoch,
        owners: list[str],
        key_groups: Mapping[str, Any] | None = None,
    ) -> float | None:
        """Record ``epoch`` (every task reported it) through the hooks.

        Args:
            epoch: The complete open epoch.
            owners: Owner names of the stateful tasks, sorted.
            key_groups: The key-group tables of the epoch (None or empty: the
                hooks are called without them, as before key-groups routing).

        Returns:
            The commit time, or None if the hooks failed (logged; the epoch
            is lost and a later one must be opened).
        """
        try:
            if key_groups:
                self._hooks.commit(
                    epoch.epoch, epoch.offsets, owners, key_groups=key_groups
                )
            else:
                self._hooks.commit(epoch.epoch, epoch.offsets, owners)
        except StormBridgeError as exc:
            logger.error("epoch %s could not commit: %s", epoch.epoch, exc)
            return None
        now = self._clock()
        self.committed.append(epoch.stats(now))
        return now
