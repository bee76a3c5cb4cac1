"""ZooKeeper adapter: the only package that imports kazoo.

The names below load their module on first use (PEP 562): a process that needs
only :mod:`zk.paths` or :mod:`zk.epoch_control` (a spout or plain bolt task)
never imports kazoo, and a ring node never imports the embedded launcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sr3.exports import lazy_exports

if TYPE_CHECKING:
    from zk.client import SessionState, StateListener, ZkSession, connect
    from zk.election import ElectionState, LeadershipCallback, ZkElection
    from zk.kazoo_errors import translate_error
    from zk.launcher import EmbeddedZooKeeper
    from zk.manifests import ZkManifestStore
    from zk.membership import ZkMembership
    from zk.paths import ZkPaths, quote_name, unquote_name

__all__ = [
    "ElectionState",
    "EmbeddedZooKeeper",
    "LeadershipCallback",
    "SessionState",
    "StateListener",
    "ZkElection",
    "ZkManifestStore",
    "ZkMembership",
    "ZkPaths",
    "ZkSession",
    "connect",
    "quote_name",
    "translate_error",
    "unquote_name",
]

#: Each export's module, imported when the name is first read.
_EXPORTS = {
    "SessionState": "zk.client",
    "StateListener": "zk.client",
    "ZkSession": "zk.client",
    "connect": "zk.client",
    "translate_error": "zk.kazoo_errors",
    "ElectionState": "zk.election",
    "LeadershipCallback": "zk.election",
    "ZkElection": "zk.election",
    "EmbeddedZooKeeper": "zk.launcher",
    "ZkManifestStore": "zk.manifests",
    "ZkMembership": "zk.membership",
    "ZkPaths": "zk.paths",
    "quote_name": "zk.paths",
    "unquote_name": "zk.paths",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
