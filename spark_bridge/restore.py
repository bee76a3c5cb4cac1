"""The ``sr3_restore`` data source: a query's state restored from the SR3 ring.

When a query starts on an empty Spark checkpoint, its first micro-batch reads
one partition per owner of the committed epoch (:func:`restore_options`); each
partition restores its owner through star, line or tree recovery
(``sr3.recovery.mechanism`` of the component) on an executor and yields
``restore`` rows (keyed by the state key, a stored route with the fields),
which the stateful stage installs into Spark's state store, plus one ``info``
row carrying the restore's report. Every owner the commit
record names is restored, whichever engine committed it and whatever task
count the component had then.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from backend.access import RingAccess, config_from_conf
from spark_bridge.rows import INFO, RESTORE, ROW_SCHEMA
from sr3.codec import encode_key, encode_value
from sr3.errors import ConfigError
from sr3.key_state import ROUTE_FIELD
from sr3.state import KeyedState
from zk.checkpoints import CommitRecord

if TYPE_CHECKING:
    from spark_bridge.ring_owners import Owner

__all__ = ["RESTORE_SOURCE", "RestoreSource", "restore_options"]

#: Format name of the restore data source.
RESTORE_SOURCE: Final = "sr3_restore"


def restore_options(
    *,
    record: CommitRecord,
    owners: Sequence[Owner],
    ring_conf: Mapping[str, Any],
    secret_file: Path | None,
) -> dict[str, str]:
    """Return the ``sr3_restore`` options restoring ``owners`` at ``record``'s epoch.

    Every owner the record names for a stateful component of ``owners`` is
    restored, also when the component now runs with another task count. The
    ring secret never goes into the options (they are visible in Spark's
    plans): ``secret_file`` names a file holding it, readable by the executors.
    """
    components = {o.component: o for o in owners}
    restored = []
    for name in sorted(record.owners):
        topology, _sep, rest = name.partition("/")
        component = rest.rpartition("/")[0]
        owner = components.get(component)
        if owner is not None and name.startswith(f"{topology}/{component}/"):
            # every committed owner: a rescaled component's keys come from all
            restored.append(
                {
                    "name": name,
                    "component": component,
                    "key_groups": owner.key_groups,
                    "mechanism": owner.mechanism,
                }
            )
    return {
        "epoch": str(record.epoch),
        "owners": json.dumps(restored),
        "ring": json.dumps(dict(ring_conf)),
        "secretFile": "" if secret_file is None else str(secret_file),
    }


@dataclass(frozen=True)
class _OwnerPartition(InputPartition):
    name: str
    component: str
    key_groups: int
    mechanism: str


class _RestoreReader(DataSourceStreamReader):
    """One micro-batch: a partition per owner; then nothing more."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._epoch = int(options["epoch"])
        self._owners = json.loads(options["owners"])
        self._ring = json.loads(options["ring"])
        self._secret_file = options.get("secretFile") or ""

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        """Return the offset before the restore."""
        return {"epoch": self._epoch, "restored": False}

    def latestOffset(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any], limit: ReadLimit
    ) -> dict[str, Any]:
        """Return the offset after the restore (all at once, whatever the limit)."""
        del start, limit
        return {"epoch": self._epoch, "restored": True}

    def partitions(  # noqa: D102 (documented by Spark)
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[InputPartition]:
        if start.get("restored") or not end.get("restored"):
            return []
        return [
            _OwnerPartition(
                o["name"], o["component"], int(o["key_groups"]), o["mechanism"]
            )
            for o in self._owners
        ]

    def commit(self, end: dict[str, Any]) -> None:  # noqa: D102 - Spark's doc
        del end

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Restore one owner from the ring; yield its keys as ``restore`` rows."""
        if not isinstance(partition, _OwnerPartition):
            msg = f"sr3_restore cannot read a {type(partition).__name__} partition"
            raise TypeError(msg)
        conf = dict(self._ring)
        if self._secret_file:
            path = Path(self._secret_file)
            try:
                conf["sr3.node.secret"] = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                msg = (
                    f"sr3_restore: cannot read the ring secret file {path} ({exc}); "
                    "it must be readable at the same path on every executor"
                )
                raise ConfigError(msg) from exc
        access = RingAccess(config_from_conf(conf))
        try:
            record = CommitRecord(epoch=self._epoch, owners=(partition.name,))
            state, report = access.restorer.restore(
                partition.name,
                record,
                key_group_count=partition.key_groups,
                mechanism=partition.mechanism,
            )
        finally:
            access.close()
        return _restore_rows(partition, state, report.to_dict())


def _restore_rows(
    partition: _OwnerPartition, state: KeyedState, report: Mapping[str, Any]
) -> Iterator[tuple[Any, ...]]:
    component = partition.component
    keys = 0
    for key, route, fields in state.routed_items():
        keys += 1
        # the stored entry: a key's route (not its own) goes with its fields
        entry = fields if route is None else {ROUTE_FIELD: route, **fields}
        yield (
            component,
            "",
            RESTORE,
            None,
            encode_key(key),
            encode_value(entry),
            "",
        )
    info = {"restore": partition.name, "keys": keys, "pid": os.getpid(), **report}
    yield (component, partition.name, INFO, None, None, encode_value(info), "")


class RestoreSource(DataSource):
    """Data source ``sr3_restore``: options from :func:`restore_options`."""

    @classmethod
    def name(cls) -> str:
        """Return the format name."""
        return RESTORE_SOURCE

    def schema(self) -> str:
        """Return the bridge's row schema."""
        return ROW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's
        """Return the reader restoring the owners the options name."""
        del schema
        return _RestoreReader(self.options)
