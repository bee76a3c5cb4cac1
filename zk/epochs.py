"""Native-mode checkpoint coordination of a topology in ZooKeeper.

Under ``sr3.checkpoint.mode=native`` (a real Storm cluster, no local-cluster
coordinator), a coordinating spout task drives stop-the-world epochs through
these znodes (see :mod:`zk.paths`)::

    /topologies/<name>/native/control        EpochControl (phase, epoch, generation)
    /topologies/<name>/native/generation     int; (re)started tasks bump it
    /topologies/<name>/native/coordinator    ephemeral, the coordinator's name
    /topologies/<name>/native/tasks/<kind>/<task>    spout tasks and owners
    /topologies/<name>/native/reports/<step>/<task>  one report per task and step

The protocol itself lives in :mod:`storm_bridge.native`; this module only reads
and writes the records, translating kazoo errors into ``CoordinationError``. The
control record's type is :class:`zk.epoch_control.EpochControl`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError, CoordinationError
from zk.client import ZkSession
from zk.epoch_control import EpochControl, Phase, step_name
from zk.paths import unquote_name

# EpochControl, Phase and step_name live in zk.epoch_control; they are
# re-exported here because storm_bridge/native.py, storm_bridge/native_agents.py
# and storm_bridge/sparse/monitor.py import them from this module.
__all__ = ["EpochControl", "Phase", "ZkEpochStore", "step_name"]

logger = logging.getLogger(__name__)

_CAS_ATTEMPTS = 50


class ZkEpochStore:
    """Reads and writes one topology's native-mode records.

    Args:
        session: An open session; it stays owned by the caller.
        topology: The topology name.
    """

    def __init__(self, session: ZkSession, topology: str) -> None:
        self._session = session
        self._topology = topology
        self._paths = session.paths
        self._watching = False

    # -- helpers ----------------------------------------------------------------------

    def _get(self, path: str) -> Any:
        client = self._session.client
        with self._session.translate(f"read {path}", path):
            try:
                data, _stat = self._session.call(
                    partial(client.get_async, path), across_expiry=True
                )
            except NoNodeError:
                return None
        return unpack_meta(data)

    def _put(self, path: str, value: Any, *, across_expiry: bool = False) -> None:
        body = pack_meta(value)
        client = self._session.client
        call = partial(self._session.call, across_expiry=across_expiry)
        with self._session.translate(f"write {path}", path):
            try:
                call(partial(client.set_async, path, body))
            except NoNodeError:
                try:
                    call(partial(client.create_async, path, body, makepath=True))
                except NodeExistsError:
                    call(partial(client.set_async, path, body))

    # -- control ----------------------------------------------------------------------

    def control(self, *, fresh: bool = False) -> EpochControl | None:
        """Return the control record (None before the coordinator wrote one).

        Args:
            fresh: Sync with the leader first, so the read is not stale.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: the record is malformed.
        """
        path = self._paths.native_control(self._topology)
        if fresh:
            with self._session.translate("sync native control", path):
                self._session.call(partial(self._session.client.sync_async, path))
        raw = self._get(path)
        return None if raw is None else EpochControl.from_dict(raw)

    def set_control(self, control: EpochControl) -> None:
        """Write the control record.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        self._put(self._paths.native_control(self._topology), control.to_dict())

    def watch_control(self, callback: Callable[[EpochControl | None], None]) -> None:
        """Call ``callback`` with the control record now and on every change.

        The callback runs on kazoo's event thread: it must return quickly.
        """
        path = self._paths.native_control(self._topology)

        def changed(data: bytes | None, _stat: Any) -> None:
            if data is None:
                callback(None)
                return
            try:
                callback(EpochControl.from_dict(unpack_meta(data)))
            except CodecError:
                logger.exception("native control at %s is malformed", path)

        self._session.client.DataWatch(path, changed)
        self._watching = True

    # -- generation -------------------------------------------------------------------

    def generation(self) -> int:
        """Return the rollback counter (0 before the first bump).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        raw = self._get(self._paths.native_generation(self._topology))
        return 0 if raw is None else int(raw)

    def bump_generation(self) -> int:
        """Increment the rollback counter; return the new value.

        Raises:
            CoordinationError: ZooKeeper failed or the race was lost too often.
        """
        return self.request_rollback(None)

    def request_rollback(self, seen: int | None) -> int:
        """Increment the rollback counter unless it moved past ``seen``.

        Several tasks that see failures of one generation ask for one rollback,
        not one each: once the counter is past ``seen``, a rollback is already
        asked for and its value is returned unchanged.

        Every call is made again in a new session if this one expires
        meanwhile: the counter is persistent and the bump a compare-and-set,
        and a spout on Storm that asks for a rollback under load (2 s
        sessions by default) must not die of it, with its whole worker.

        Args:
            seen: The generation the caller's failure belongs to (None: bump
                whatever the counter holds).

        Returns:
            The generation whose rollback replays the caller's failure.

        Raises:
            CoordinationError: ZooKeeper failed or the race was lost too often.
        """
        path = self._paths.native_generation(self._topology)
        client = self._session.client
        call = partial(self._session.call, across_expiry=True)
        with self._session.translate("bump native generation", path):
            for _ in range(_CAS_ATTEMPTS):
                try:
                    data, stat = call(partial(client.get_async, path))
                except NoNodeError:
                    try:
                        call(
                            partial(
                                client.create_async, path, pack_meta(1), makepath=True
                            )
                        )
                    except NodeExistsError:
                        continue
                    return 1
                current = int(unpack_meta(data))
                if seen is not None and current > seen:
                    return current
                value = current + 1
                try:
                    call(
                        partial(client.set_async, path, pack_meta(value), stat.version)
                    )
                except BadVersionError:
                    continue
                return value
        msg = f"bump of {path}: lost the compare-and-set race {_CAS_ATTEMPTS} times"
        raise CoordinationError(msg)

    # -- tasks and reports ------------------------------------------------------------

    def register(self, kind: str, task: str) -> bool:
        """Record that ``task`` (a spout task or a stateful owner) takes part.

        Returns:
            Whether it was registered before (this start is a restart).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.native_task(self._topology, kind, task)
        client = self._session.client
        body = pack_meta({"task": task})
        with self._session.translate(f"register native {kind} {task!r}", path):
            try:
                self._session.call(
                    partial(client.create_async, path, body, makepath=True)
                )
            except NodeExistsError:
                return True
        return False

    def registered(self, kind: str) -> set[str]:
        """Return the registered tasks of ``kind``.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.native_tasks(self._topology, kind)
        with self._session.translate(f"list native {kind} tasks", path):
            return {unquote_name(n) for n in self._session.children(path)}

    def report(self, step: str, task: str, payload: Mapping[str, Any]) -> None:
        """Record ``task``'s report of ``step`` (idempotent).

        A persistent znode, so written again in the new session if this one
        expires meanwhile: a task's session expiring under load (2 s by
        default) must not end the task, and on Storm its whole worker.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        self._put(
            self._paths.native_report(self._topology, step, task),
            dict(payload),
            across_expiry=True,
        )

    def reports(self, step: str) -> dict[str, Any]:
        """Return every report of ``step`` by task.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        parent = self._paths.native_step(self._topology, step)
        with self._session.translate(f"read native reports of {step}", parent):
            names = self._session.children(parent)
            found = self._session.get_many(f"{parent}/{n}" for n in names)
        return {
            unquote_name(path.rsplit("/", 1)[1]): unpack_meta(data)
            for path, (data, _stat) in found.items()
        }

    def steps(self) -> list[str]:
        """Return the names of the steps whose reports are kept.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        parent = self._paths.native_reports(self._topology)
        with self._session.translate("list native report steps", parent):
            return sorted(unquote_name(n) for n in self._session.children(parent))

    def drop_steps(self, keep: Collection[str]) -> None:
        """Delete the reports of every step not in ``keep``.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        parent = self._paths.native_reports(self._topology)
        client = self._session.client
        with self._session.translate("drop old native reports", parent):
            for name in self._session.children(parent):
                if unquote_name(name) not in keep:
                    try:
                        client.delete(f"{parent}/{name}", recursive=True)
                    except NoNodeError:
                        continue

    # -- coordinator and reset --------------------------------------------------------

    def claim_coordinator(self, name: str) -> bool:
        """Hold the ephemeral coordinator znode as ``name``; return whether held.

        A znode left by an earlier incarnation of ``name`` (a killed process
        whose session has not expired yet) is taken over.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.native_coordinator(self._topology)
        client = self._session.client
        mine = self._session.session_id
        with self._session.translate("claim native coordinator", path):
            try:
                data, stat = self._session.call(partial(client.get_async, path))
            except NoNodeError:
                pass
            else:
                if stat.ephemeralOwner == mine:
                    return True
                if unpack_meta(data) != name:
                    return False
                try:
                    client.delete(path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    return False
            try:
                self._session.call(
                    partial(
                        client.create_async,
                        path,
                        pack_meta(name),
                        ephemeral=True,
                        makepath=True,
                    ),
                    retry=False,
                )
            except NodeExistsError:
                return False
        return True

    def coordinator(self) -> str | None:
        """Return the name of the task holding the coordinator znode, else None.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        holder = self._get(self._paths.native_coordinator(self._topology))
        return None if holder is None else str(holder)

    def release_coordinator(self) -> None:
        """Delete the coordinator znode if this session holds it.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.native_coordinator(self._topology)
        client = self._session.client
        with self._session.translate("release native coordinator", path):
            try:
                _data, stat = self._session.call(partial(client.get_async, path))
            except NoNodeError:
                return
            if stat.ephemeralOwner == self._session.session_id:
                try:
                    client.delete(path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    return

    def reset(self) -> None:
        """Delete every native-mode record of the topology (a fresh run).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.native(self._topology)
        client = self._session.client
        with self._session.translate("reset native checkpoints", path):
            try:
                # retried across a lost connection (a ZooKeeper restart as the
                # run starts): deleting what is gone already is harmless
                client.retry(client.delete, path, recursive=True)
            except NoNodeError:
                return
