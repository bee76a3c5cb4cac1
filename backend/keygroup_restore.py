"""Restoring and handing over the key groups of a key-group-routed task.

Under ``sr3.rebalance.routing = key-groups`` a component's key group -> task
index table decides which task owns each key group, and every commit record
carries the table of its epoch (:class:`zk.checkpoints.CommitRecord`). A task
restoring epoch ``e`` with table ``now`` (the one its tuples are routed by)
takes each key group ``now`` gives it from the owner the record's table gave
it at ``e``: its own owner for the key groups it kept, only the moving key
groups' shards of another owner for the others (:func:`restore_assigned`). A
record without a table was written under Storm's fields grouping: any of its
owners may hold any key group, so each is read and filtered by key group.

:func:`install_key_groups` is the live hand-over's receiving side: the key
groups of a batch read from the sender's snapshot at the switch epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from backend.owners import component_owners, owner_name
from sr3.keygroups import decode_table
from sr3.state import KeyedState

if TYPE_CHECKING:
    from backend.lazy import LoadStats
    from backend.restorer import RestoreReport, StateRestorer
    from backend.shard_cache import ShardCache
    from zk.checkpoints import CommitRecord

__all__ = ["install_key_groups", "restore_assigned"]

logger = logging.getLogger(__name__)


def install_key_groups(  # noqa: PLR0913 (what a hand-over reads)
    restorer: StateRestorer,
    state: KeyedState,
    owner: str,
    epoch: int,
    key_groups: Iterable[int],
    cache: ShardCache | None = None,
) -> int:
    """Install ``key_groups`` of ``owner``'s snapshot at ``epoch`` into ``state``.

    A key group the snapshot does not hold (no state yet) is emptied here.
    Returns the payload bytes read (shards ``cache`` held are not read again).

    Raises:
        RecoveryError, ShardNotFoundError: the snapshot cannot be read.
        CoordinationError: ZooKeeper failed.
    """
    wanted = sorted(set(key_groups))
    layers, size = restorer.read_key_groups(owner, epoch, wanted, cache)
    state.drop_key_groups(wanted)
    for layer in layers:
        state.install(layer)
    return size


def restore_assigned(  # noqa: PLR0913 (what identifies a task and its restore)
    restorer: StateRestorer,
    *,
    topology: str,
    component: str,
    index: int,
    table: Sequence[int],
    record: CommitRecord | None,
    mechanism: str,
    lazy: bool = False,
    on_loaded: Callable[[LoadStats], None] | None = None,
) -> tuple[KeyedState, RestoreReport]:
    """Restore task ``index`` of a key-group-routed component: its key groups.

    It takes the key groups ``table`` gives it (``table[kg] == index``) of the
    committed epoch ``record``.

    When ``table`` is the record's own table, this is the plain restore of the
    task's owner (lazy when asked).

    Raises:
        RecoveryError, ShardNotFoundError: a snapshot cannot be read.
        CoordinationError: ZooKeeper failed.
        ConfigError: the record's table does not fit ``table``'s G.
    """
    from backend.restorer import RestoreReport  # noqa: PLC0415 - ring clients on demand

    groups = len(table)
    owner = owner_name(topology, component, index)
    committed = component_owners(record.owners, topology, component) if record else []
    stored = record.key_groups.get(component) if record else None
    before = None if stored is None else decode_table(stored, groups)
    if record is None or not committed or before == list(table):
        if lazy:
            return restorer.restore_lazily(
                owner,
                record,
                key_group_count=groups,
                mechanism=mechanism,
                on_loaded=on_loaded,
            )
        return restorer.restore(
            owner, record, key_group_count=groups, mechanism=mechanism
        )
    started = time.perf_counter()
    mine = {kg for kg, i in enumerate(table) if i == index}
    state = KeyedState(groups)
    size = 0
    shards = 0
    if before is None:
        # written under Storm's fields grouping: every owner may hold any key
        # group, so each is read and filtered
        for old in committed:
            part, report = restorer.restore(
                old, record, key_group_count=groups, mechanism=mechanism
            )
            size += report.bytes_read
            shards += report.shards
            for key, route, fields in part.routed_items():
                if state.key_group_of(key) in mine:
                    state.for_key(key, route).update(fields)
        how = f"key groups by table from {len(committed)} fields-routed owners"
    else:
        sources: dict[int, list[int]] = {}
        for kg in sorted(mine):
            sources.setdefault(before[kg], []).append(kg)
        own = sources.pop(index, [])
        if own and owner in record.owners:
            state, report = restorer.restore(
                owner, record, key_group_count=groups, mechanism=mechanism
            )
            size += report.bytes_read
            shards += report.shards
            state.drop_key_groups(set(range(groups)) - set(own))
        for source, kgs in sources.items():
            name = owner_name(topology, component, source)
            if name in record.owners:
                size += install_key_groups(restorer, state, name, record.epoch, kgs)
        how = (
            f"key groups by table: {len(own)} kept, "
            f"{sum(len(k) for k in sources.values())} from {len(sources)} owners"
        )
    logger.info("%s restored epoch %s: %s", owner, record.epoch, how)
    return state, RestoreReport(
        record.epoch,
        mechanism,
        how,
        shards,
        size,
        time.perf_counter() - started,
        reason=f"{component} key-group table changed since epoch {record.epoch}",
    )
