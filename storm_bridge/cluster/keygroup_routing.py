"""Key-group routing of the local cluster (``sr3.rebalance.routing = key-groups``).

Under this setting a fields grouping into a stateful bolt routes a tuple by its
key group, ``murmur3(encode_key(grouping values)) mod G``
(:func:`sr3.keygroups.key_group`), through the component's key group -> task
index table: ``target_tasks[table[kg]]``. The bolt keys its state by the same
grouping values, so a key's storage key group is its routing key group, and
moving a key group between tasks moves exactly its keys (Megaphone). The table
starts as the contiguous ranges of :func:`sr3.keygroups.range_table`, or the
table of the committed epoch a run resumes from; ``sr3 rebalance`` changes it
batch by batch (:mod:`storm_bridge.cluster.keygroup_rebalance`). Commit records
carry it (:class:`zk.checkpoints.CommitRecord`), so a restore places key groups
by the table of the epoch it restores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from sr3.config import Sr3Config, read_setting
from sr3.errors import ConfigError
from sr3.keygroups import decode_table, encode_table, key_group, range_table
from topology_api.barriers import KEY_GROUP_TABLE_KEY
from topology_api.contract import overrides_state_key
from topology_api.groupings import FieldsGrouper, GroupingKind
from topology_api.java_hash import IntegerBoxing
from topology_api.topology import LoadedTopology

if TYPE_CHECKING:
    from storm_bridge.cluster.context import Router
    from storm_bridge.cluster.tasks import TaskRuntime

__all__ = [
    "KEY_GROUPS",
    "ROUTING_KEY",
    "TABLE_CONF_KEY",
    "KeyGroupGrouper",
    "encoded_tables",
    "group_count",
    "initial_tables",
    "install_tables",
    "key_group_components",
    "table_conf",
]

#: The setting choosing the routing into stateful bolts.
ROUTING_KEY: Final = "sr3.rebalance.routing"
#: Its value turning key-group routing on.
KEY_GROUPS: Final = "key-groups"
#: Conf key the cluster sets on each task of a key-group-routed component: the
#: table its restore places key groups by (JSON of the encoded table).
TABLE_CONF_KEY: Final = KEY_GROUP_TABLE_KEY

E_NOT_GROUPING_KEYED: Final = (
    "{setting} = {value}: stateful bolt {name!r} {why}; key-group routing needs "
    "a stateful bolt keyed by its fields grouping (every input "
    "Grouping.fields(...) with fields, no state_key override), so a key's state "
    "lives in the key group its tuples route to. Fix the bolt, or set "
    "{setting} = fields"
)


class KeyGroupGrouper(FieldsGrouper):
    """A fields grouping routed by key group through a key group -> task table.

    Args:
        target_tasks: The component's task ids.
        output_fields: The stream's fields.
        group_fields: The grouping's fields.
        table: The component's table (``table[kg]`` = task index); shared with
            the cluster, which changes it in place as key groups move.
        boxing: Unused by the routing (kept for :meth:`select`'s checks).
    """

    def __init__(
        self,
        target_tasks: Sequence[int],
        *,
        output_fields: Sequence[str],
        group_fields: Sequence[str],
        table: list[int],
        boxing: IntegerBoxing = IntegerBoxing.LONG,
    ) -> None:
        super().__init__(
            target_tasks,
            output_fields=output_fields,
            group_fields=group_fields,
            boxing=boxing,
        )
        self.table = table

    def key_group(self, values: Sequence[Any]) -> int:
        """Return the key group of a tuple (of its grouping values).

        Raises:
            ValueError: the tuple lacks a grouping field.
        """
        return key_group(tuple(self.select(values)), len(self.table))

    def choose_tasks(self, values: Sequence[Any]) -> list[int]:  # noqa: D102
        return [self.target_tasks[self.table[self.key_group(values)]]]


def key_group_components(
    topology: LoadedTopology, conf: Mapping[str, Any]
) -> list[str]:
    """Return the stateful bolts routed by key group (none unless the setting asks).

    Raises:
        ConfigError: the setting is invalid, or a stateful bolt is not keyed by
            its fields grouping (the message names the bolt and the fix).
    """
    value = read_setting(conf, ROUTING_KEY)
    if value != KEY_GROUPS:
        return []
    if read_setting(conf, "sr3.checkpoint.mode") != "local":
        msg = (
            f"{ROUTING_KEY} = {KEY_GROUPS} needs sr3.checkpoint.mode = local (the "
            "local cluster's coordinator switches the key-group tables at its "
            f"commits); set {ROUTING_KEY} = fields for native mode"
        )
        raise ConfigError(msg)
    found: list[str] = []
    for name, comp in topology.components.items():
        if comp.kind != "bolt" or not comp.stateful:
            continue
        why = ""
        if overrides_state_key(comp.component_cls):
            why = "overrides state_key (its state key is not its grouping values)"
        for sub in comp.inputs:
            grouping = sub.grouping
            if grouping.kind is not GroupingKind.FIELDS or not grouping.fields:
                why = (
                    f"subscribes to {sub.source!r} stream {sub.stream!r} with a "
                    f"{grouping.kind.value} grouping"
                )
        if why:
            msg = E_NOT_GROUPING_KEYED.format(
                setting=ROUTING_KEY, value=KEY_GROUPS, name=name, why=why
            )
            raise ConfigError(msg)
        found.append(name)
    return found


def initial_tables(
    components: Mapping[str, tuple[int, int]], stored: Mapping[str, Any]
) -> dict[str, list[int]]:
    """Return each key-group-routed component's table at the start of a run.

    Args:
        components: ``{component: (task count, key-group count)}``.
        stored: The tables of the committed epoch the run starts from
            (:attr:`zk.checkpoints.CommitRecord.key_groups`; empty: none).

    A resumed component keeps the record's table when it runs as many tasks
    as the table names (a rebalanced, uneven layout stays as it was); otherwise
    it starts with contiguous ranges, and its tasks read their key groups from
    wherever the record's table (or, without one, Storm's fields grouping)
    put them.

    Raises:
        ConfigError: the record's table does not fit the component's G.
    """
    tables: dict[str, list[int]] = {}
    for name, (tasks, groups) in components.items():
        runs = stored.get(name)
        if runs is not None:
            table = decode_table(runs, groups)
            if max(table) + 1 == tasks:
                tables[name] = table
                continue
        tables[name] = range_table(tasks, groups)
    return tables


def install_tables(
    topology: LoadedTopology,
    conf: Mapping[str, Any],
    router: Router,
    tasks: Mapping[int, TaskRuntime],
    stored: Mapping[str, Any],
) -> None:
    """Route the key-group-routed components through their start tables.

    Sets :attr:`Router.key_groups` and gives each of their tasks its table
    (:data:`TABLE_CONF_KEY` in its conf). Nothing when the setting is
    ``fields``.

    Raises:
        ConfigError: see :func:`key_group_components`.
    """
    names = key_group_components(topology, conf)
    components = {}
    for name in names:
        ids = router.component_tasks(name)
        components[name] = (len(ids), group_count(tasks[ids[0]].conf))
    router.key_groups = initial_tables(components, stored)
    for name, table in router.key_groups.items():
        value = table_conf(table)
        for task_id in router.component_tasks(name):
            tasks[task_id].conf[TABLE_CONF_KEY] = value


def encoded_tables(router: Router) -> dict[str, Any]:
    """The tables a commit records now, ``{component: encoded table}``."""
    return {name: encode_table(t) for name, t in router.key_groups.items()}


def table_conf(table: list[int]) -> str:
    """The value of :data:`TABLE_CONF_KEY` for ``table``."""
    return json.dumps(encode_table(table))


def group_count(conf: Mapping[str, Any]) -> int:
    """G of a component (``sr3.state.key.groups`` in its conf)."""
    return Sr3Config.from_mapping(conf, strict=False).ring.key_group_count
