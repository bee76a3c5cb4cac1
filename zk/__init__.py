"""ZooKeeper adapter: the only package that imports kazoo."""

from zk.client import SessionState, StateListener, ZkSession, connect, translate_error
from zk.election import ElectionState, LeadershipCallback, ZkElection
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
