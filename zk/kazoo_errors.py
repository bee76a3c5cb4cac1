"""Kazoo's exceptions turned into ``sr3.errors.CoordinationError`` subclasses.

:func:`translate_error` names the operation, the znode and the likely fix, and
marks whether trying again may succeed; :meth:`zk.client.ZkSession.translate`
applies it to a block. :func:`first_failure` finds the operation that failed a
multi-op transaction.
"""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError

from sr3.errors import CoordinationError, SessionLostError

__all__ = ["first_failure", "translate_error"]

E_NO_AUTH = (
    "{what}: ZooKeeper denied access to znode {path}; the znode's ACL names another "
    "digest user. Set sr3.zk.digest to the user:password that created it, or use "
    "another sr3.zk.chroot"
)
E_UNREACHABLE = (
    "{what}: ZooKeeper at {hosts} is unreachable ({exc}); check sr3.zk.hosts and "
    "that the server runs (`sr3 lab up` starts one); retrying may succeed"
)
_UNREACHABLE = (
    ConnectionLoss,
    OperationTimeoutError,
    KazooTimeoutError,
    RetryFailedError,
)


def translate_error(
    what: str, where: str, hosts: str, exc: BaseException
) -> CoordinationError:
    """Return the ``CoordinationError`` that stands for kazoo error ``exc``.

    Args:
        what: The operation, for the message.
        where: The absolute znode path concerned.
        hosts: The ensemble, named when it is unreachable.
        exc: The kazoo exception.
    """
    retriable = False
    if isinstance(exc, NoNodeError):
        msg = f"{what}: znode {where} does not exist; it was deleted or never created"
    elif isinstance(exc, NodeExistsError):
        msg = f"{what}: znode {where} exists already; another writer got there first"
    elif isinstance(exc, BadVersionError):
        msg = f"{what}: znode {where} changed concurrently; re-read and retry"
        retriable = True
    elif isinstance(exc, NotEmptyError):
        msg = f"{what}: znode {where} still has children; delete them first"
    elif isinstance(exc, NoAuthError | AuthFailedError):
        msg = E_NO_AUTH.format(what=what, path=where)
    elif isinstance(exc, ConnectionClosedError):  # before its base SessionExpiredError
        msg = f"{what}: this process closed its ZooKeeper session (znode {where})"
    elif isinstance(exc, SessionExpiredError):
        msg = (
            f"{what}: the ZooKeeper session expired (znode {where}); its ephemeral "
            "znodes are gone and come back once the client reconnects; raise "
            "sr3.zk.session.timeout.s if this happens under load"
        )
        return SessionLostError(msg)
    elif isinstance(exc, _UNREACHABLE):
        msg = E_UNREACHABLE.format(what=what, hosts=hosts, exc=type(exc).__name__)
        retriable = True
    else:
        msg = f"{what}: ZooKeeper error {type(exc).__name__} on znode {where}: {exc}"
        retriable = True
    err = CoordinationError(msg)
    err.retriable = retriable
    return err


def first_failure(results: list[Any]) -> tuple[int, Exception] | None:
    """Return the index and error of the operation that failed a transaction.

    Kazoo reports a failed multi-op as a result list in which the other
    operations carry ``RolledBackError`` or ``RuntimeInconsistency``.
    """
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(
            result, RolledBackError | RuntimeInconsistency
        ):
            return index, result
    return None
