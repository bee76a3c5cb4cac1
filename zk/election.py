"""Leader election among ring nodes; the leader coordinates repair.

Each participant owns an ephemeral sequential znode ``/election/c-<seq>`` holding
its identifier; the lowest sequence leads, and every other participant watches
only its predecessor, so a leader's death wakes one participant, not all.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from kazoo.exceptions import NoNodeError

from sr3.errors import CoordinationError
from zk.client import SHUTDOWN_CALL_TIMEOUT_S, SessionState, ZkSession
from zk.paths import CONTENDER_PREFIX, ZkPaths

__all__ = ["ElectionState", "LeadershipCallback", "ZkElection"]

logger = logging.getLogger(__name__)

LeadershipCallback = Callable[[bool], None]
_RETRY_S = 0.5


class ElectionState(enum.Enum):
    """Lifecycle of a :class:`ZkElection`: ``NEW -> RUNNING -> STOPPED``."""

    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


_MOVES = {
    ElectionState.NEW: {ElectionState.RUNNING, ElectionState.STOPPED},
    ElectionState.RUNNING: {ElectionState.STOPPED},
    ElectionState.STOPPED: set[ElectionState](),
}


class ZkElection:
    """Implements :class:`sr3.ports.Election` with ephemeral sequential znodes.

    A daemon thread keeps the participant in the election: it re-enters after
    the session expires (the contender znode died with it), replaces a znode a
    previous process with the same identifier left behind, and re-checks after
    every state change, watch event and ``recheck_s``. ``is_leader()`` is False
    whenever the session is suspended or lost. Identifiers must be unique among
    live participants (use node ids).

    Transitions: ``NEW -start()-> RUNNING -stop()-> STOPPED`` (final: build a
    new object to take part again); any other move raises ``CoordinationError``.

    Args:
        session: An open session; it stays owned by the caller.
        identifier: This participant's id, returned by :meth:`leader`.
        on_change: Called with the new ``is_leader()`` value when it flips, from
            the election thread; it must be quick and must not call
            :meth:`stop`.
        recheck_s: Period of a safety re-check between events (default 5 s).
    """

    def __init__(
        self,
        session: ZkSession,
        identifier: str,
        *,
        on_change: LeadershipCallback | None = None,
        recheck_s: float = 5.0,
    ) -> None:
        self.identifier = identifier
        self._session = session
        self._paths = session.paths
        self._on_change = on_change
        self._recheck_s = recheck_s
        self._state = ElectionState.NEW
        self._node: str | None = None
        self._leading_session: int | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._step_lock = threading.Lock()
        self._flag_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"ZkElection({self.identifier!r}, {self._state.name}, node={self._node})"

    @property
    def state(self) -> ElectionState:
        """The lifecycle state."""
        return self._state

    def _move(self, target: ElectionState) -> None:
        if target not in _MOVES[self._state]:
            msg = (
                f"election of {self.identifier!r} cannot go from {self._state.name} "
                f"to {target.name}; create a new ZkElection to take part again"
            )
            raise CoordinationError(msg)
        self._state = target

    def start(self) -> None:
        """Enter the election and keep taking part until :meth:`stop`.

        Raises:
            CoordinationError: started twice, or ZooKeeper refused the first
                entry (then the object stays ``NEW`` and ``start`` may be retried).
        """
        if self._state is not ElectionState.NEW:
            self._move(ElectionState.RUNNING)  # raises with a clear message
        self._session.add_listener(self._on_state)
        try:
            self._publish(self._step())
        except CoordinationError:
            self._session.remove_listener(self._on_state)
            raise
        self._move(ElectionState.RUNNING)
        self._thread = threading.Thread(
            target=self._run, name=f"sr3-election-{self.identifier}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Leave the election; idempotent.

        Deleting the contender znode is best effort: if ZooKeeper is unreachable
        the znode goes with the session instead (logged).
        """
        if self._state is ElectionState.STOPPED:
            return
        self._move(ElectionState.STOPPED)
        self._stopping.set()
        self._wake.set()
        self._session.remove_listener(self._on_state)
        if self._thread is not None:
            self._thread.join(timeout=self._session.config.connect_timeout_s + 1)
        with self._step_lock:
            node, self._node = self._node, None
            if node is not None and not self._session.connected:
                # retrying would hold the caller's shutdown for the retry budget
                logger.warning(
                    "left election znode %s to expire: ZooKeeper is unreachable", node
                )
            elif node is not None:
                try:
                    self._delete_ours(node)
                except CoordinationError as exc:
                    logger.warning("left election znode %s to expire: %s", node, exc)
        self._publish(leading=False)

    def is_leader(self) -> bool:
        """Return whether this participant leads right now (session included)."""
        sid = self._leading_session
        return (
            sid is not None
            and self._state is ElectionState.RUNNING
            and self._session.connected
            and self._session.session_id == sid
        )

    def leader(self) -> str | None:
        """Return the current leader's identifier, or None if nobody takes part.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        directory = self._paths.election
        with self._session.translate("read election leader", directory):
            children = self._session.children(directory)
            paths = [f"{directory}/{name}" for name in _ordered(children)]
            found = self._session.get_many(paths)
        for path in paths:
            if path in found:
                return bytes(found[path][0]).decode("utf-8")
        return None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._recheck_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                leading = self._step()
            except CoordinationError as exc:
                logger.warning("election of %s retries: %s", self.identifier, exc)
                self._publish(leading=False)
                self._stopping.wait(_RETRY_S)
                self._wake.set()
                continue
            self._publish(leading)

    def _step(self) -> bool:
        """Enter if needed, then return whether we lead; watch the predecessor."""
        with self._step_lock:
            if not self._session.connected or self._stopping.is_set():
                return False
            directory = self._paths.election
            client = self._session.client
            sid = self._session.session_id
            with self._session.translate(f"election of {self.identifier}", directory):
                self._session.call(partial(client.ensure_path_async, directory))
                ordered = self._contenders(sid)
                if self._node not in ordered:
                    self._node = self._session.call(
                        partial(
                            client.create_async,
                            self._paths.contender(),
                            self.identifier.encode("utf-8"),
                            ephemeral=True,
                            sequence=True,
                        ),
                        retry=False,  # a retry could leave a second contender
                    )
                    logger.info(
                        "%s entered the election as %s", self.identifier, self._node
                    )
                    ordered = self._contenders(sid)
                if self._node not in ordered:
                    self._wake.set()  # deleted meanwhile: enter again
                    return False
                index = ordered.index(self._node)
                if index == 0:
                    return True
                watch = partial(
                    client.exists_async, ordered[index - 1], watch=self._on_watch
                )
                if self._session.call(watch) is None:
                    self._wake.set()  # the predecessor vanished meanwhile: look again
                return False

    def _contenders(self, sid: int | None) -> list[str]:
        """Return contender paths by sequence, deleting our stale ones."""
        directory = self._paths.election
        children = self._session.children(directory)
        paths = [f"{directory}/{name}" for name in _ordered(children)]
        found = self._session.get_many(paths)
        mine = self.identifier.encode("utf-8")
        live: list[str] = []
        for path in paths:
            if path not in found:
                continue
            data, stat = found[path]
            ours = stat.ephemeralOwner == sid and path == self._node
            if data == mine and not ours:
                # Left by our previous session or process (or by a lost create).
                logger.info(
                    "removing stale election znode %s of %s", path, self.identifier
                )
                self._delete(path)
                continue
            live.append(path)
        return live

    def _delete_ours(self, path: str) -> None:
        # on the way out: one bounded attempt each (SHUTDOWN_CALL_TIMEOUT_S)
        client = self._session.client
        call = partial(
            self._session.call, retry=False, timeout_s=SHUTDOWN_CALL_TIMEOUT_S
        )
        with self._session.translate(f"leave election as {self.identifier}", path):
            stat = call(partial(client.exists_async, path))
            if stat is not None and stat.ephemeralOwner == self._session.session_id:
                try:
                    call(partial(client.delete_async, path))
                except NoNodeError:
                    logger.debug("election znode %s was already gone", path)

    def _delete(self, path: str) -> None:
        try:
            self._session.call(partial(self._session.client.delete_async, path))
        except NoNodeError:
            logger.debug("election znode %s was already gone", path)

    def _publish(self, leading: bool) -> None:
        with self._flag_lock:
            leading = leading and not self._stopping.is_set()
            was = self._leading_session is not None
            self._leading_session = self._session.session_id if leading else None
        if leading == was:
            return
        logger.info(
            "%s %s leadership", self.identifier, "gained" if leading else "lost"
        )
        if self._on_change is not None:
            try:
                self._on_change(leading)
            except Exception:
                logger.exception(
                    "election on_change callback %r failed", self._on_change
                )

    def _on_state(self, state: SessionState) -> None:
        # Runs on kazoo's connection thread: only wake the election thread.
        logger.debug("election of %s sees session %s", self.identifier, state.name)
        self._wake.set()

    def _on_watch(self, event: Any) -> None:
        self._wake.set()


def _ordered(children: list[str]) -> list[str]:
    """Return the contender names among ``children`` by sequence number."""
    contenders = [c for c in children if c.startswith(CONTENDER_PREFIX)]
    return sorted(contenders, key=ZkPaths.sequence_of)
