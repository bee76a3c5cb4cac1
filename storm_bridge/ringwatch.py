"""A run's view of the ring: which registrations left, and the killed nodes it awaits.

Registrations are compared, not node ids: a ring node killed and started again
before its old ZooKeeper session ended replaces its member znode in place, and
the membership watch may report that as one change with the same ids. Its
previous registration left all the same, and so did whatever that process held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sr3.errors import CoordinationError, SR3Error
from sr3.ports import Membership, MembershipChange, NodeInfo

__all__ = ["RingWatch"]

logger = logging.getLogger(__name__)

#: How long a run's start waits for ZooKeeper to take the membership watch.
START_WAIT_S: Final = 30.0


@dataclass
class _KilledNode:
    """A ring node the run killed, awaited until it left and the run handled it.

    Attributes:
        node: Its id.
        killed_at: When it was killed (run clock).
        registration: What was registered under its id when it was killed: the
            registration whose end the run waits for.
        left_at: When that registration was seen to end (the run then rolls
            back or gives up the open epoch); None while it is still in the ring.
    """

    node: str
    killed_at: float
    registration: NodeInfo
    left_at: float | None = None

    def held_by(self, members: Mapping[str, NodeInfo]) -> bool:
        """Whether ``members`` still has the registration the kill ended."""
        now = members.get(self.node)
        return now is not None and now.same_registration(self.registration)

    def replaced_in(self, members: Mapping[str, NodeInfo]) -> bool:
        """Whether ``members`` has a newer registration of the node (a restart)."""
        now = members.get(self.node)
        old = self.registration.incarnation
        return (
            now is not None
            and now.incarnation is not None
            and old is not None
            and now.incarnation > old
        )


class RingWatch:
    """Calls ``on_left(node)`` whenever a registration leaves the ring.

    A node that left and registered again between two membership calls counts
    as a departure. Each ``on_left`` runs on a thread of its own (membership
    callbacks must be quick). Nodes announced with :meth:`killing` are pending
    until the registration they had when killed left the ring (its session
    ended, or a restarted process replaced it) and ``on_left`` returned for it.

    Args:
        membership: The ring's membership.
        on_left: Handles a departure (a rollback); it must not raise.
        clock: Monotonic clock in seconds.
        connected: Whether this process is connected to ZooKeeper right now.
    """

    def __init__(
        self,
        membership: Membership,
        on_left: Callable[[str], None],
        clock: Callable[[], float],
        connected: Callable[[], bool],
    ) -> None:
        self._membership = membership
        self._on_left = on_left
        self._clock = clock
        self._connected = connected
        self._lock = threading.Lock()
        self._handled = threading.Condition(self._lock)
        #: The ring as the watch last reported it.
        self._members: dict[str, NodeInfo] = {}
        #: Killed ring nodes whose departure has not been handled yet.
        self._pending: dict[str, _KilledNode] = {}

    def start(self, *, wait_s: float = START_WAIT_S, pause_s: float = 0.5) -> None:
        """Start watching (the first membership call runs now, in this thread).

        A ZooKeeper that is restarting, or a session that expired meanwhile, is
        waited for up to ``wait_s``: the client reconnects with a new session and
        the watch is set then (a chaos ``restart-zk`` early in a run used to end
        the run here).

        Raises:
            CoordinationError: the watch could not be set within ``wait_s``.
        """
        deadline = self._clock() + wait_s
        while True:
            try:
                self._membership.watch(self._changed)
            except CoordinationError as exc:
                if self._clock() + pause_s > deadline:
                    raise
                logger.warning("ring membership watch not set (%s); retrying", exc)
                time.sleep(pause_s)
            else:
                return

    def killing(self, node: str) -> None:
        """Count ``node``, about to be killed, as pending until its registration left.

        A node not in the ring is not counted: its kill takes nothing from it.
        """
        try:
            # the watch may not have reported a node that just registered
            registered = self._membership.members().get(node)
        except SR3Error as exc:
            logger.warning("cannot read ring node %s's registration: %s", node, exc)
            registered = None
        with self._lock:
            registration = self._members.get(node) or registered
            if registration is None:
                logger.info(
                    "ring node %s is not in the ring: nothing to wait for", node
                )
                return
            self._pending[node] = _KilledNode(node, self._clock(), registration)

    def wait_handled(self, deadline: float) -> bool:
        """Wait until no killed node is pending; False if ``deadline`` came first."""
        with self._handled:
            return self._handled.wait_for(
                lambda: not self._pending, max(0.0, deadline - self._clock())
            )

    def reason(self, started: float) -> str | None:
        """What the pending killed nodes keep waiting for (None: nothing).

        Args:
            started: When the run started (run clock), for the times named.
        """
        with self._lock:
            pending = sorted(self._pending.values(), key=lambda k: k.node)
        reasons: list[str] = []
        for killed in pending:
            if killed.left_at is not None:
                reasons.append(
                    f"waiting for the run to handle ring node {killed.node} "
                    f"leaving the ring ({killed.left_at - started:.1f} s into the "
                    "run): a rollback, or under task scope the open epoch given up"
                )
                continue
            reasons.append(
                f"waiting for ring node {killed.node} to leave the ring: its "
                "ZooKeeper session has not ended (the node was killed at "
                f"{killed.killed_at - started:.1f} s; its registration "
                f"{incarnation(killed.registration)} is still in the ring)"
            )
        if reasons and not self._connected():
            reasons.append("this run is not connected to ZooKeeper")
        return "; ".join(reasons) or None

    def _changed(self, members: Mapping[str, NodeInfo]) -> None:
        with self._lock:
            change = MembershipChange.between(self._members, members)
            self._members = dict(members)
            departed = {info.node_id: info for info in change.left}
            released: dict[str, list[_KilledNode]] = {}
            for killed in self._pending.values():
                if killed.left_at is not None:
                    continue
                if killed.node in departed:
                    if killed.held_by(members):
                        continue  # an older registration left, not this one
                elif killed.replaced_in(members):
                    # it left and a newer one registered between two calls
                    departed[killed.node] = killed.registration
                else:
                    continue
                killed.left_at = self._clock()
                released.setdefault(killed.node, []).append(killed)
        for node, info in sorted(departed.items()):
            if node in change.rejoined:
                logger.info(
                    "ring node %s registered again (incarnation %s, was %s): its "
                    "previous registration left the ring",
                    node,
                    incarnation(members[node]),
                    incarnation(info),
                )
            threading.Thread(
                target=self._left,
                args=(node, released.get(node, [])),
                name=f"sr3-ring-left-{node}",
                daemon=True,
            ).start()

    def _left(self, node: str, killed: Sequence[_KilledNode]) -> None:
        try:
            self._on_left(node)
        finally:
            with self._handled:
                for entry in killed:
                    if self._pending.get(entry.node) is entry:
                        del self._pending[entry.node]
                self._handled.notify_all()


def incarnation(info: NodeInfo) -> str:
    """Return ``info``'s incarnation for messages (hex, or ``(unknown)``)."""
    return "(unknown)" if info.incarnation is None else f"{info.incarnation:#x}"
