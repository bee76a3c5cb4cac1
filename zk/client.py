"""A chrooted, retrying kazoo session, and how it is opened.

:func:`connect` opens the session; everything else in ``zk/`` talks to ZooKeeper
through :class:`ZkSession`, and turns kazoo exceptions into
``sr3.errors.CoordinationError`` subclasses with :meth:`ZkSession.translate`
(the translation itself is :mod:`zk.kazoo_errors`').
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from types import TracebackType
from typing import Any, Final

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from sr3.config import ZkConfig
from sr3.errors import ConfigError, CoordinationError
from zk.kazoo_errors import translate_error
from zk.paths import ZkPaths

__all__ = [
    "SHUTDOWN_CALL_TIMEOUT_S",
    "SessionState",
    "StateListener",
    "ZkSession",
    "connect",
]

logger = logging.getLogger(__name__)

#: One attempt's bound, without retries, for what a process does on its way
#: out (leaving an election, withdrawing a ring member): its ephemeral znodes
#: go with its session anyway, so a ZooKeeper that stopped first (``sr3 lab
#: down`` of a lab without lab.json signals everything at once) must not hold
#: the shutdown for the whole retry budget (15 s by default).
SHUTDOWN_CALL_TIMEOUT_S: Final = 2.0
# Reconnect fast: a short session timeout is useless if reconnects back off to 60 s.
_RETRY_DELAY_S = 0.05
_RETRY_MAX_DELAY_S = 0.5
#: How long one connect attempt waits for the server's reply, about. kazoo
#: waits session timeout / number of hosts, and ZooKeeper 3.8.0 leaves
#: connections made while it starts open and unanswered ("ZooKeeperServer not
#: running", then a NullPointerException in its close: about 1 restart in 10
#: under load here). A client that connected then waited its whole session and
#: came back to an expired one. So each host is listed several times: an
#: attempt gives up after about this long and the next one reaches the server.
#: Sessions shorter than two of these keep one listing: the copies make a
#: dropped client reconnect at once, without the retry's back-off (a session
#: cloned by a test's expiry trick was then taken back before the clone could
#: close it), and a 2 s session barely outlives a restart anyway.
_CONNECT_REPLY_S = 2.5


class SessionState(enum.Enum):
    """The session as listeners see it (kazoo's simplified states).

    ``CONNECTED`` -> ``SUSPENDED`` (connection dropped, the session may survive)
    -> ``CONNECTED`` (same session) or ``LOST`` (expired: ephemeral znodes are
    gone) -> ``CONNECTED`` (a new session).
    """

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


StateListener = Callable[[SessionState], None]


def _retry(
    *, max_tries: int, deadline: float | None, across_expiry: bool = False
) -> Any:
    return KazooRetry(
        max_tries=max_tries,
        delay=_RETRY_DELAY_S,
        max_delay=_RETRY_MAX_DELAY_S,
        deadline=deadline,
        ignore_expire=across_expiry,
    )


class ZkSession:
    """A started, chrooted kazoo client and the paths of its cluster.

    Kazoo calls while disconnected wait for the reconnect; :meth:`call` bounds
    that wait by ``config.connect_timeout_s``.

    Args:
        client: A started :class:`kazoo.client.KazooClient` (chroot in its hosts).
        config: The configuration it was opened with.
        hosts: The ``host:port`` list, without the chroot.
    """

    def __init__(self, client: Any, config: ZkConfig, *, hosts: str) -> None:
        self.client: Any = client
        self.config = config
        self.hosts = hosts
        self.paths = ZkPaths(config.chroot)
        self._listeners: dict[StateListener, Callable[[str], None]] = {}

    def __repr__(self) -> str:
        return f"ZkSession({self.hosts}{self.config.chroot}, {self.state.name})"

    @property
    def state(self) -> SessionState:
        """The current connection state."""
        return SessionState(str(self.client.state))

    @property
    def connected(self) -> bool:
        """Whether the session is usable right now."""
        return bool(self.client.state == KazooState.CONNECTED)

    @property
    def session_id(self) -> int | None:
        """The server's id of the current session, None while disconnected."""
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(state)`` on every state change.

        Listeners run on kazoo's connection thread: they must return quickly and
        must not call ZooKeeper (that would deadlock); hand work to a thread.
        """

        def relay(state: str) -> None:
            listener(SessionState(str(state)))

        self._listeners[listener] = relay
        self.client.add_listener(relay)

    def remove_listener(self, listener: StateListener) -> None:
        """Stop calling ``listener`` (no error if it was not added)."""
        relay = self._listeners.pop(listener, None)
        if relay is not None:
            self.client.remove_listener(relay)

    def call(
        self,
        operation: Callable[[], Any],
        *,
        retry: bool = True,
        timeout_s: float | None = None,
        across_expiry: bool = False,
    ) -> Any:
        """Run a kazoo ``*_async`` operation and return its result.

        Args:
            operation: Starts the operation and returns kazoo's async result,
                e.g. ``lambda: client.get_async(path)``.
            retry: Retry on connection loss with the client's command retry
                policy (until ``connect_timeout_s``); pass False for operations
                that are not idempotent.
            timeout_s: One attempt's bound (default ``connect_timeout_s``).
                With ``retry=False`` and :data:`SHUTDOWN_CALL_TIMEOUT_S`, what
                a process does on its way out.
            across_expiry: With ``retry``, also retry on the session's expiry,
                in the new session kazoo opens (same bound): for reads, and
                writes that neither rely on this session's ephemeral znodes nor
                on having seen every change since it started.

        Raises:
            KazooException: as raised by kazoo; wrap the call in
                :meth:`translate`.
        """
        bound = self.config.connect_timeout_s if timeout_s is None else timeout_s

        def once() -> Any:
            return operation().get(timeout=bound)

        if not retry:
            return once()
        if across_expiry:
            policy = _retry(
                max_tries=-1, deadline=self.config.connect_timeout_s, across_expiry=True
            )
            return policy(once)
        return self.client.retry(once)

    def children(self, path: str) -> list[str]:
        """Return the children of ``path`` ([] if it does not exist).

        Raises:
            KazooException: as raised by kazoo; wrap the call in
                :meth:`translate`.
        """
        try:
            names: list[str] = self.call(partial(self.client.get_children_async, path))
        except NoNodeError:
            return []
        return names

    def watch_children(self, path: str, func: Callable[[list[str]], Any]) -> None:
        """Call ``func(children)`` now and after every change of ``path``'s children.

        kazoo's ``ChildrenWatch`` (``func`` returning False ends it), which
        reads again after every reconnect, a new session's included. A change
        read just as the session expires is read on the new session, logged
        in one line instead of kazoo's traceback.
        """
        _ChildrenWatch(self.client, path, func)

    def get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, Any]]:
        """Read several znodes concurrently, skipping any that do not exist.

        Returns:
            ``{path: (data, stat)}`` for the znodes that exist.

        Raises:
            KazooException: as raised by kazoo; wrap the call in
                :meth:`translate`.
        """
        pending = [(path, self.client.get_async(path)) for path in paths]
        found: dict[str, tuple[bytes, Any]] = {}
        for path, result in pending:
            try:
                data, stat = result.get(timeout=self.config.connect_timeout_s)
            except NoNodeError:
                logger.debug("znode %s vanished while being read", path)
                continue
            found[path] = (data, stat)
        return found

    @contextmanager
    def translate(self, what: str, path: str = "/") -> Iterator[None]:
        """Re-raise kazoo errors inside the block as ``CoordinationError``.

        Args:
            what: The operation, for the message ("register node n1").
            path: The chroot-relative znode concerned, named in the message.

        Raises:
            SessionLostError: the session expired.
            CoordinationError: any other kazoo error; ``retriable`` tells
                whether trying again may succeed.
        """
        try:
            yield
        except (KazooException, KazooTimeoutError) as exc:
            where = self.paths.absolute(path)
            raise translate_error(what, where, self.hosts, exc) from exc

    def close(self) -> None:
        """End the session (its ephemeral znodes vanish) and free the client."""
        for listener in list(self._listeners):
            self.remove_listener(listener)
        self.client.stop()
        self.client.close()

    def __enter__(self) -> ZkSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _ChildrenWatch(ChildrenWatch):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's ``ChildrenWatch``, whose read at a session expiry is no error.

    kazoo 2.11 reads the children with the client's retry, which stops at an
    expiry (a read queued on the callback thread meets the expired state):
    ``SessionExpiredError`` then reaches kazoo's worker thread, which logs
    "Exception in worker queue thread" and its traceback. Nothing is lost: the
    watch's session listener reads again once the new session is connected.
    """

    def _get_children(self, event: Any = None) -> None:
        try:
            super()._get_children(event)
        except SessionExpiredError:
            logger.info(
                "watch of %s: the session expired during a read; it reads again "
                "on the new session",
                self._path,
            )


def _security(config: ZkConfig) -> tuple[list[Any] | None, list[tuple[str, str]]]:
    if not config.digest:
        return None, []
    user, _, password = config.digest.partition(":")
    acl = make_digest_acl(user, password, all=True)
    return [acl], [("digest", config.digest)]


def _start(client: Any, config: ZkConfig, hosts: str, what: str) -> None:
    try:
        client.start(timeout=config.connect_timeout_s)
    except KazooTimeoutError as exc:
        msg = (
            f"{what}: no ZooKeeper session with {hosts} within "
            f"{config.connect_timeout_s} s; check sr3.zk.hosts and that the server "
            "runs (`sr3 lab up` starts one), or raise sr3.zk.connect.timeout.s"
        )
        raise CoordinationError(msg) from exc


def _attempt_hosts(hosts: str, session_timeout_s: float) -> str:
    """Return ``hosts`` with each listed as often as keeps one connect attempt short.

    kazoo waits ``session_timeout_s / len(hosts)`` for a server's reply to a
    connect; listing each host ``k`` times divides that wait by ``k`` (a host
    that refuses connections costs nothing extra). See ``_CONNECT_REPLY_S``.
    """
    listed = [h.strip() for h in hosts.split(",") if h.strip()]
    copies = max(1, int(session_timeout_s / (len(listed) * _CONNECT_REPLY_S)))
    return ",".join(listed * copies)


def _ensure_chroot(config: ZkConfig, hosts: str, *, create: bool = True) -> None:
    acl, auth = _security(config)
    client = KazooClient(
        hosts=_attempt_hosts(hosts, config.session_timeout_s),
        timeout=config.session_timeout_s,
        auth_data=auth,
        connection_retry=_retry(max_tries=-1, deadline=None),
        # a connection lost mid-request (ZooKeeper restarting while a task
        # starts) is retried until the session is back, as in connect()
        command_retry=_retry(max_tries=-1, deadline=config.connect_timeout_s),
    )
    what = f"{'create' if create else 'look up'} chroot {config.chroot}"
    _start(client, config, hosts, what)
    try:
        # Parents are shared by every cluster on the ensemble, so only the
        # chroot itself carries this cluster's digest ACL.
        parent = config.chroot.rpartition("/")[0]
        if client.retry(client.exists, config.chroot) is not None:
            return
        if not create:
            msg = (
                f"no sr3 cluster at {hosts}: its chroot znode {config.chroot} does "
                "not exist; check --chroot or sr3.zk.chroot (default /sr3/default), "
                "or start ring nodes there first"
            )
            raise CoordinationError(msg)
        if parent:
            client.retry(client.ensure_path, parent, acl=OPEN_ACL_UNSAFE)
        # a retried create whose first attempt landed finds the znode: fine
        client.retry(client.create, config.chroot, b"", acl=acl)
    except NodeExistsError:
        logger.debug("chroot %s was created concurrently", config.chroot)
    except KazooException as exc:
        raise translate_error(what, config.chroot, hosts, exc) from exc
    finally:
        client.stop()
        client.close()


def connect(
    config: ZkConfig, *, hosts: str | None = None, create: bool = True
) -> ZkSession:
    """Open a ZooKeeper session rooted at ``config.chroot``, creating the chroot.

    The client reconnects on its own (every 0.5 s at most) and keeps its
    session if it reconnects within ``config.session_timeout_s``. With
    ``config.digest`` set, it authenticates and every znode it creates gets a
    digest ACL for that user only.

    Args:
        config: Hosts, chroot, timeouts and digest.
        hosts: Overrides ``config.hosts`` (e.g. an embedded server's).
        create: Create a missing chroot (nodes and writers); readers pass False
            so a mistyped chroot is an error instead of an empty cluster.

    Raises:
        ConfigError: no hosts given.
        CoordinationError: no session within ``config.connect_timeout_s``, or
            the chroot could not be created (or, without ``create``, is missing).
    """
    hosts = hosts or config.hosts
    if not hosts:
        msg = (
            "sr3.zk.hosts is empty: set it to host:port[,host:port], or start an "
            "embedded server (`sr3 lab up`) and use its address"
        )
        raise ConfigError(msg)
    _ensure_chroot(config, hosts, create=create)
    acl, auth = _security(config)
    client = KazooClient(
        hosts=_attempt_hosts(hosts, config.session_timeout_s) + config.chroot,
        timeout=config.session_timeout_s,
        default_acl=acl,
        auth_data=auth,
        connection_retry=_retry(max_tries=-1, deadline=None),
        command_retry=_retry(max_tries=-1, deadline=config.connect_timeout_s),
    )
    _start(client, config, hosts, "connect")
    session = ZkSession(client, config, hosts=hosts)
    logger.info(
        "ZooKeeper session 0x%x on %s%s", session.session_id or 0, hosts, config.chroot
    )
    return session
