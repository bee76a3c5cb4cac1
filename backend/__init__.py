"""The state backend: one layer below both engines, above the ring and ZooKeeper.

Storm's local cluster, Storm's native mode (real Apache Storm) and the Spark
engine all checkpoint through it; none decides compaction, commit or garbage
collection itself:

- :mod:`backend.owners`: owner ids, ``<topology>/<component>/<task index>``,
  built and parsed here only;
- :mod:`backend.chain`: when a snapshot is FULL and when a DELTA (compaction),
  and the per-owner :class:`~backend.chain.OwnerChain` that tracks it;
- :mod:`backend.committer`: the epoch committer: the next epoch of a run,
  the commit record, and garbage collection of superseded chains;
- :mod:`backend.rescale`: which committed keys a task of a rescaled component
  takes (by the route a fields grouping sends their tuples by).

The ring and the ZooKeeper stores it uses live in :mod:`sr3` and :mod:`zk`.
"""

from __future__ import annotations

from backend.chain import ChainPolicy, OwnerChain
from backend.committer import EpochCommitter, next_epoch
from backend.owners import OwnerId, component_owners, owner_name

__all__ = [
    "ChainPolicy",
    "EpochCommitter",
    "OwnerChain",
    "OwnerId",
    "component_owners",
    "next_epoch",
    "owner_name",
]
