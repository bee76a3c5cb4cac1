"""Wiring a task or a runner to ZooKeeper and the ring (see :mod:`backend.access`).

Kept as storm_bridge's import point: a stateful task subprocess opens a
:class:`RingAccess` from its Storm conf to restore its key groups from the last
globally committed epoch and to write its snapshots.
"""

from backend.access import CommitRecord, RingAccess, config_from_conf
from backend.restorer import RestoreReport

__all__ = ["CommitRecord", "RestoreReport", "RingAccess", "config_from_conf"]
