"""Ring membership as ephemeral znodes: register, list and watch live nodes.

Each live node owns ``/members/<node id>`` (an ephemeral znode holding its
:class:`~sr3.ports.NodeInfo`), so the announcement ends with the node's session.
The znode's creation zxid is the registration's incarnation: a node that left
and registered again keeps its id but not its incarnation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError, CoordinationError
from sr3.ports import MembersCallback, NodeInfo
from sr3.ring import MAX_CAPACITY
from zk.client import SHUTDOWN_CALL_TIMEOUT_S, SessionState, ZkSession
from zk.paths import unquote_name

__all__ = ["METRICS_URL", "ZkMembership"]

logger = logging.getLogger(__name__)

_ANNOUNCE_ATTEMPTS = 5
#: Field of a member's record holding its Prometheus endpoint.
METRICS_URL = "metrics_url"
#: A registration written by another version or by hand, with a capacity the
#: ring cannot place (0, negative, huge, not a number).
W_BAD_CAPACITY = (
    "member %(node)s (%(path)s) registered capacity %(value)r, outside 1..%(top)s; "
    "the ring counts it as %(used)s. Restart that node with `sr3 node --capacity "
    "N` (N in 1..%(top)s) so it registers a valid one"
)


class ZkMembership:
    """Implements :class:`sr3.ports.Membership` with ephemeral znodes.

    ``register`` replaces a znode left by the node's previous process (a restart
    within the session timeout) and re-creates the node's znode by itself after
    the session expires and the client reconnects with a new one. Every read
    sets :attr:`NodeInfo.incarnation <sr3.ports.NodeInfo.incarnation>` to the
    member znode's creation zxid, so a registration replaced in place (a
    restarted node taking its id over from its previous process) is told from
    the one it replaced. Listing skips a member whose data cannot be decoded,
    with a warning, so one bad entry does not blind every node; a member whose
    capacity is no whole number in 1..:data:`~sr3.ring.MAX_CAPACITY` counts
    with the nearest valid one (1 when it is no number), with one warning per
    member and value.

    Args:
        session: An open session; it stays owned by the caller.
    """

    def __init__(self, session: ZkSession) -> None:
        self._session = session
        self._paths = session.paths
        self._registered: dict[str, bytes] = {}
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._warned: set[tuple[str, str]] = set()
        #: One refresh per watch, run after every reconnect (see :meth:`watch`).
        self._refreshes: list[Callable[[], object]] = []
        self._reconnecting = False
        session.add_listener(self._on_state)

    def __repr__(self) -> str:
        return f"ZkMembership({self._session!r}, registered={sorted(self._registered)})"

    def register(self, info: NodeInfo, *, metrics_url: str | None = None) -> None:
        """Announce ``info`` under its node id until the session ends.

        ``metrics_url``, the node's Prometheus endpoint, is published beside it
        (:meth:`metrics_urls` lists them).

        Raises:
            CoordinationError: ZooKeeper failed, or another live process keeps
                re-creating the same node id.
        """
        record = info.to_dict()
        if metrics_url is not None:
            record[METRICS_URL] = metrics_url
        data = pack_meta(record)
        with self._lock:
            self._registered[info.node_id] = data
            self._announce(info.node_id)

    def unregister(self, node_id: str, *, leaving: bool = False) -> None:
        """Withdraw ``node_id`` if this session announced it (no error if gone).

        A znode owned by another session (another process using the same id) is
        left alone, with a warning.

        Args:
            node_id: The node.
            leaving: The process is on its way out: one attempt per request,
                bounded by :data:`~zk.client.SHUTDOWN_CALL_TIMEOUT_S`, instead of
                retrying (the member znode goes with the session anyway).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        path = self._paths.member(node_id)
        client = self._session.client
        call: Callable[[Callable[[], Any]], Any] = self._session.call
        if leaving:
            call = partial(
                self._session.call, retry=False, timeout_s=SHUTDOWN_CALL_TIMEOUT_S
            )
        with self._lock, self._session.translate(f"unregister node {node_id}", path):
            self._registered.pop(node_id, None)
            stat = call(partial(client.exists_async, path))
            if stat is None:
                return
            if stat.ephemeralOwner != self._session.session_id:
                logger.warning(
                    "member %s belongs to session 0x%x, not ours; left in place",
                    node_id,
                    stat.ephemeralOwner,
                )
                return
            try:
                call(partial(client.delete_async, path, stat.version))
            except NoNodeError:
                logger.debug("member %s vanished while unregistering", node_id)

    def members(self) -> dict[str, NodeInfo]:
        """Return the live nodes by id.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        directory = self._paths.members
        with self._session.translate("list members", directory):
            return self._read(self._session.children(directory))

    def metrics_urls(self) -> dict[str, str]:
        """Return the metrics endpoint each live node published, by node id.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        directory = self._paths.members
        with self._session.translate("list metrics endpoints", directory):
            children = self._session.children(directory)
            paths = [f"{directory}/{child}" for child in children]
            found = self._session.get_many(paths)
        urls: dict[str, str] = {}
        for data, _stat in found.values():
            try:
                raw = unpack_meta(data)
            except CodecError:
                continue  # members() warns of it
            if isinstance(raw, Mapping) and isinstance(raw.get(METRICS_URL), str):
                urls[str(raw.get("node_id"))] = raw[METRICS_URL]
        return urls

    def watch(self, callback: MembersCallback) -> None:
        """Call ``callback(members)`` now and after every membership change.

        The first call runs in the caller's thread, later ones on kazoo's
        callback thread, which serves every watch of the session: callbacks must
        be quick (hand real work to another thread) and must not block on
        ZooKeeper. An exception in ``callback`` is logged and the watch goes on.
        Watches end with :meth:`close`.

        Each call gets a listing read after the change, one call at a time, so
        calls never go back in time. A node that left and registered again
        between two calls has the same id in both but another incarnation
        (ZooKeeper may report the deletion and the creation as one change):
        compare calls with :meth:`sr3.ports.MembershipChange.between`. After
        every reconnect the watch calls again, even with the ids unchanged:
        kazoo's ``ChildrenWatch`` then stays silent, though a node may have been
        replaced while this client was away.

        Raises:
            CoordinationError: the watch could not be set.
        """
        directory = self._paths.members
        client = self._session.client
        order = threading.Lock()

        def deliver() -> bool | None:
            if self._closed.is_set():
                return False  # tells kazoo to drop the watch
            with order:
                try:
                    members = self.members()
                except CoordinationError as exc:
                    logger.warning("membership watch skipped a change: %s", exc)
                    return None
                try:
                    callback(members)
                except Exception:
                    logger.exception("membership callback %r failed", callback)
            return None

        def on_children(_children: list[str]) -> bool | None:
            # kazoo's list only says that something changed: it was read before
            # this call waited for the previous one, so it may be older
            return deliver()

        with self._session.translate("watch members", directory):
            self._session.call(partial(client.ensure_path_async, directory))
            self._session.watch_children(directory, on_children)
        with self._lock:
            self._refreshes.append(deliver)

    def close(self) -> None:
        """Stop watching and re-registering; the znodes live on with the session."""
        self._closed.set()
        self._session.remove_listener(self._on_state)

    def _read(self, children: list[str]) -> dict[str, NodeInfo]:
        paths = [f"{self._paths.members}/{child}" for child in children]
        with self._session.translate("read members", self._paths.members):
            found = self._session.get_many(paths)
        members: dict[str, NodeInfo] = {}
        for path, (data, stat) in found.items():
            try:
                info = NodeInfo.from_dict(self._checked(path, unpack_meta(data)))
                _check_member(path, info)
            except (CodecError, KeyError, TypeError, ValueError) as exc:
                logger.warning("member znode %s is unreadable, skipped: %s", path, exc)
                continue
            members[info.node_id] = replace(info, incarnation=int(stat.czxid))
        return members

    def _checked(self, path: str, raw: Any) -> Mapping[str, Any]:
        """Return ``raw`` with its capacity made placeable (warned once)."""
        if not isinstance(raw, Mapping) or "capacity" not in raw:
            return raw  # NodeInfo.from_dict decides
        value = raw["capacity"]
        number = _whole_number(value)
        used = 1 if number is None else min(max(number, 1), MAX_CAPACITY)
        if number == used:
            return raw
        node = str(raw.get("node_id", path))
        if (node, repr(value)) not in self._warned:
            self._warned.add((node, repr(value)))
            fields = {"node": node, "path": path, "value": value, "used": used}
            logger.warning(W_BAD_CAPACITY, {**fields, "top": MAX_CAPACITY})
        return {**raw, "capacity": used}

    def _announce(self, node_id: str) -> None:
        """Make ``/members/<node_id>`` ours with the registered data (lock held)."""
        path = self._paths.member(node_id)
        client = self._session.client
        what = f"register node {node_id}"
        with self._session.translate(what, path):
            self._session.call(partial(client.ensure_path_async, self._paths.members))
            for _ in range(_ANNOUNCE_ATTEMPTS):
                data = self._registered.get(node_id)
                if data is None:
                    return  # unregistered meanwhile
                try:
                    self._session.call(
                        partial(client.create_async, path, data, ephemeral=True)
                    )
                    logger.info("registered node %s at %s", node_id, path)
                    return
                except NodeExistsError:
                    logger.debug("member znode %s exists; checking its owner", path)
                if self._owned(path, data):
                    return
        msg = (
            f"{what}: znode {self._paths.absolute(path)} keeps coming back; another "
            f"live process registers node id {node_id!r}. Give each node its own id"
        )
        raise CoordinationError(msg)

    def _owned(self, path: str, data: bytes) -> bool:
        """Return True if ``path`` is ours with ``data``; else delete it (stale)."""
        client = self._session.client
        try:
            current, stat = self._session.call(partial(client.get_async, path))
        except NoNodeError:
            return False
        if stat.ephemeralOwner == self._session.session_id and current == data:
            return True
        logger.info(
            "replacing member znode %s of session 0x%x (a previous run or old data)",
            path,
            stat.ephemeralOwner,
        )
        try:
            self._session.call(partial(client.delete_async, path, stat.version))
        except (NoNodeError, BadVersionError):
            logger.debug("member znode %s changed while replacing it", path)
        return False

    def _on_state(self, state: SessionState) -> None:
        # Runs on kazoo's connection thread: never call ZooKeeper here.
        if state is not SessionState.CONNECTED:
            self._reconnecting = True
            return
        if self._closed.is_set():
            return
        if self._registered:
            threading.Thread(
                target=self._reassert, name="sr3-zk-reregister", daemon=True
            ).start()
        if self._reconnecting and self._refreshes:
            self._reconnecting = False
            threading.Thread(
                target=self._refresh, name="sr3-zk-members-refresh", daemon=True
            ).start()

    def _refresh(self) -> None:
        """Call every watch again with a fresh listing (after a reconnect)."""
        with self._lock:
            refreshes = list(self._refreshes)
        for deliver in refreshes:
            deliver()

    def _reassert(self) -> None:
        """Re-announce every registered node (after a reconnect or a new session)."""
        with self._lock:
            for node_id in list(self._registered):
                try:
                    self._announce(node_id)
                except CoordinationError as exc:
                    logger.warning(
                        "could not re-register node %s (retried on the next "
                        "reconnect): %s",
                        node_id,
                        exc,
                    )


def _check_member(path: str, info: NodeInfo) -> None:
    """Refuse a registration no node could have made (written by hand).

    Raises:
        ValueError: its id is not its znode's name (it would hide that node),
            or its address cannot be connected to.
    """
    name = unquote_name(path.rsplit("/", 1)[-1])
    if info.node_id != name:
        msg = (
            f"it names node {info.node_id!r}, not {name!r}; delete the znode "
            "(a live node registers itself again)"
        )
        raise ValueError(msg)
    if not info.host or not 0 < info.port < 2**16:
        msg = (
            f"address {info.host!r}:{info.port} is no TCP address; restart node "
            f"{name} (it registers its real address) or delete the znode"
        )
        raise ValueError(msg)


def _whole_number(value: object) -> int | None:
    """Return ``value`` as an int (``3`` or ``"3"``), or None if it is none."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None
