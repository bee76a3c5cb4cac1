"""Rebalance requests to a running topology, and the run's live record.

Layout (see :mod:`zk.paths`)::

    /topologies/<name>/live        ephemeral: {"components", "tasks", "rebalance"}
    /topologies/<name>/rebalance   {"id", "targets", "state", "detail", "result"}

``sr3 run`` creates ``live`` (its session's ephemeral znode: it vanishes with
the run) and watches ``rebalance``. ``sr3 rebalance`` writes a request there
in state ``requested``; the run moves it to ``accepted`` (or ``refused``, with
the reason) and then ``done``. A request is refused while the previous one is
still ``requested`` or ``accepted``: one rebalance at a time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError, CoordinationError
from zk.client import ZkSession

__all__ = ["RebalanceBusyError", "RebalanceRequest", "ZkRebalanceStore"]

REQUESTED: Final = "requested"
ACCEPTED: Final = "accepted"
DONE: Final = "done"
REFUSED: Final = "refused"
#: States of a request the run has not finished with.
OPEN_STATES: Final = frozenset({REQUESTED, ACCEPTED})


class RebalanceBusyError(CoordinationError):
    """A rebalance request is still open for the topology (not retriable)."""

    retriable = False


@dataclass(frozen=True)
class RebalanceRequest:
    """One ``sr3 rebalance`` request and what became of it.

    Attributes:
        request_id: Unique id.
        targets: ``{component: task count}``.
        state: ``requested``, ``accepted``, ``done`` or ``refused``.
        detail: Why it was refused, or what the run did.
        requested_at: Wall-clock seconds of the request.
        result: The run's report entry once done.
    """

    request_id: str
    targets: Mapping[str, int]
    state: str = REQUESTED
    detail: str = ""
    requested_at: float = 0.0
    result: Mapping[str, Any] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        """Whether the run has not finished with it."""
        return self.state in OPEN_STATES

    def to_dict(self) -> dict[str, Any]:
        """Return a msgpack- and JSON-friendly dict."""
        return {
            "id": self.request_id,
            "targets": dict(self.targets),
            "state": self.state,
            "detail": self.detail,
            "requested_at": self.requested_at,
            "result": dict(self.result),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RebalanceRequest:
        """Build from :meth:`to_dict` output.

        Raises:
            CodecError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                request_id=str(raw["id"]),
                targets={str(k): int(v) for k, v in dict(raw["targets"]).items()},
                state=str(raw["state"]),
                detail=str(raw.get("detail", "")),
                requested_at=float(raw.get("requested_at", 0.0)),
                result=dict(raw.get("result") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed rebalance request {dict(raw)!r}: {exc}"
            raise CodecError(msg) from exc


class ZkRebalanceStore:
    """Rebalance requests and live-run records of topologies.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def __init__(self, session: ZkSession) -> None:
        self._session = session
        self._paths = session.paths

    def __repr__(self) -> str:
        return f"ZkRebalanceStore({self._session!r})"

    # -- the running run's record ------------------------------------------------------

    def publish_live(self, topology: str, info: Mapping[str, Any]) -> None:
        """Create or update the ephemeral record of the running run.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.live(topology)
        client = self._session.client
        body = pack_meta(dict(info))
        with self._session.translate(f"publish the live run of {topology!r}", path):
            try:
                self._session.call(partial(client.set_async, path, body))
            except NoNodeError:
                create = partial(
                    client.create_async, path, body, ephemeral=True, makepath=True
                )
                self._session.call(create, retry=False)

    def live(self, topology: str) -> dict[str, Any] | None:
        """Return the running run's record of ``topology`` (None: no run).

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: the record is malformed.
        """
        path = self._paths.live(topology)
        client = self._session.client
        with self._session.translate(f"read the live run of {topology!r}", path):
            try:
                data, _stat = self._session.call(partial(client.get_async, path))
            except NoNodeError:
                return None
        return dict(unpack_meta(data))

    def withdraw_live(self, topology: str) -> None:
        """Delete the running run's record (the run ends).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.live(topology)
        client = self._session.client
        with self._session.translate(f"withdraw the live run of {topology!r}", path):
            try:
                self._session.call(partial(client.delete_async, path))
            except NoNodeError:
                return

    def watch_live(self, topology: str, changed: Callable[[bool], None]) -> None:
        """Call ``changed(exists)`` now and whenever the run's record comes or goes.

        The record is ephemeral: it goes when the run withdraws it or when the
        run's ZooKeeper session ends (the run was killed). Called on kazoo's
        thread.
        """
        path = self._paths.live(topology)

        def relay(_data: bytes | None, stat: Any) -> None:
            changed(stat is not None)

        self._session.client.DataWatch(path, relay)

    # -- requests ----------------------------------------------------------------------

    def get(self, topology: str) -> tuple[RebalanceRequest, int] | None:
        """Return the last request of ``topology`` and its znode version.

        Raises:
            CoordinationError: ZooKeeper failed.
            CodecError: the stored request is malformed.
        """
        path = self._paths.rebalance(topology)
        client = self._session.client
        with self._session.translate(f"read the rebalance of {topology!r}", path):
            try:
                data, stat = self._session.call(partial(client.get_async, path))
            except NoNodeError:
                return None
        return RebalanceRequest.from_dict(unpack_meta(data)), int(stat.version)

    def request(self, topology: str, targets: Mapping[str, int]) -> RebalanceRequest:
        """Write a new request for the running run of ``topology``.

        Raises:
            RebalanceBusyError: the previous request is still open.
            CoordinationError: ZooKeeper failed.
        """
        request = RebalanceRequest(
            request_id=uuid.uuid4().hex[:12],
            targets=dict(targets),
            requested_at=time.time(),
        )
        path = self._paths.rebalance(topology)
        client = self._session.client
        body = pack_meta(request.to_dict())
        found = self.get(topology)
        with self._session.translate(f"request a rebalance of {topology!r}", path):
            try:
                if found is None:
                    create = partial(client.create_async, path, body, makepath=True)
                    self._session.call(create, retry=False)
                else:
                    previous, version = found
                    # an open request of a run that ended is stale, not busy
                    if previous.open and self.live(topology) is not None:
                        raise _busy(topology, previous)
                    self._session.call(
                        partial(client.set_async, path, body, version=version),
                        retry=False,
                    )
            except (NodeExistsError, BadVersionError) as exc:
                # another request got in between: it is the open one now
                again = self.get(topology)
                other = again[0] if again is not None else request
                raise _busy(topology, other) from exc
        return request

    def update(self, topology: str, request: RebalanceRequest, **changes: Any) -> None:
        """Record the run's progress on ``request`` (state, detail, result).

        Raises:
            CoordinationError: ZooKeeper failed.
            TypeError: an unknown field is named.
        """
        changed = replace(request, **changes)
        path = self._paths.rebalance(topology)
        client = self._session.client
        body = pack_meta(changed.to_dict())
        with self._session.translate(f"update the rebalance of {topology!r}", path):
            self._session.call(partial(client.set_async, path, body))

    def watch(
        self, topology: str, changed: Callable[[RebalanceRequest | None], None]
    ) -> None:
        """Call ``changed(request)`` now and after every change (kazoo's thread).

        A malformed request is passed as None (and logged by the caller's
        next read).
        """
        path = self._paths.rebalance(topology)

        def relay(data: bytes | None, _stat: Any) -> None:
            request = None
            if data:
                try:
                    request = RebalanceRequest.from_dict(unpack_meta(data))
                except CodecError:
                    request = None
            changed(request)

        self._session.client.DataWatch(path, relay)


def _busy(topology: str, previous: RebalanceRequest) -> RebalanceBusyError:
    targets = ", ".join(f"{c}={n}" for c, n in previous.targets.items())
    msg = (
        f"topology {topology!r} is already rebalancing (request "
        f"{previous.request_id}: {targets}, {previous.state}); wait for it to "
        "finish (sr3 status shows it), then ask again"
    )
    return RebalanceBusyError(msg)
