"""Connecting a CLI command to a ring: through a lab dir or a ZooKeeper ensemble."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from sr3.client import ClientPool
from sr3.config import Sr3Config, ZkConfig
from sr3.errors import AuthenticationError, ConfigError, SR3Error, StorageError
from sr3.replication import LiveMembers, ReplicatedStore
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.secret_file import read_secret
from zk.client import ZkSession, connect
from zk.manifests import ZkManifestStore
from zk.membership import ZkMembership

__all__ = [
    "Cluster",
    "check_secret",
    "checked_config",
    "cluster_config",
    "open_cluster",
    "secret_source",
    "wait_for_members",
]

E_AUTH_REFUSED = (
    "ring node {node} refused this command's secret ({source}): {exc}. Use the "
    "ring's secret: --lab DIR uses DIR/secret, --secret-file FILE or "
    "SR3_NODE_SECRET otherwise"
)


def cluster_config(args: argparse.Namespace) -> Sr3Config:
    """Return the configuration that reaches the ring named on the command line.

    Raises:
        ConfigError: neither a lab nor a ZooKeeper address was given.
    """
    base = Sr3Config.from_env()
    lab_dir = resolve_lab_dir(getattr(args, "lab", None))
    if getattr(args, "zk", None):
        zk = replace(base.zk, hosts=args.zk, chroot=args.chroot or base.zk.chroot)
        node = replace(
            base.node, secret=read_secret(args.secret_file) or base.node.secret
        )
        return replace(base, zk=zk, node=node)
    if lab_dir is not None:
        lab = Lab.load(lab_dir)
        if not lab.zookeeper_running:
            msg = (
                f"the lab in {lab_dir} is stopped (its ZooKeeper is not running); "
                f"start it with `sr3 lab up --dir {lab_dir}`"
            )
            raise ConfigError(msg)
        cfg = lab.config(base)
        if args.chroot:
            cfg = replace(cfg, zk=replace(cfg.zk, chroot=args.chroot))
        if args.secret_file:
            cfg = replace(
                cfg, node=replace(cfg.node, secret=read_secret(args.secret_file))
            )
        return cfg
    if base.zk.hosts:
        return base
    msg = (
        "no ring to talk to: pass --lab DIR (after `sr3 lab up --dir DIR`), set "
        "SR3_LAB, or pass --zk HOST:PORT of a real ZooKeeper ensemble"
    )
    raise ConfigError(msg)


@dataclass
class Cluster:
    """Open handles on a ring."""

    config: Sr3Config
    session: ZkSession
    membership: ZkMembership
    manifests: ZkManifestStore
    pool: ClientPool
    store: ReplicatedStore


@contextmanager
def open_cluster(config: Sr3Config, *, create: bool = True) -> Iterator[Cluster]:
    """Connect to ZooKeeper and the ring nodes; close everything on exit.

    Read-only commands pass ``create=False``: a chroot that does not exist is
    then an error naming it, not an empty cluster created on the spot.
    """
    zk_cfg: ZkConfig = config.zk
    session = connect(zk_cfg, create=create)
    pool = ClientPool(config.node)
    membership = ZkMembership(session)
    store = ReplicatedStore(
        members=LiveMembers(membership), pool=pool, ring_config=config.ring
    )
    try:
        yield Cluster(
            config=config,
            session=session,
            membership=membership,
            manifests=ZkManifestStore(session),
            pool=pool,
            store=store,
        )
    finally:
        store.close()
        pool.close_all()
        session.close()


def check_secret(cluster: Cluster, source: str) -> None:
    """Authenticate to one live ring node, so a wrong secret is named as such.

    Without it a recovery with a wrong secret sees every holder fail and
    reports missing shards. Nodes that cannot be reached are skipped.

    Raises:
        ConfigError: a node refused the secret (``source`` says where it came from).
    """
    for node_id, info in sorted(cluster.membership.members().items()):
        try:
            with cluster.pool.client(info) as client:
                client.ping()
        except AuthenticationError as exc:
            msg = E_AUTH_REFUSED.format(node=node_id, source=source, exc=exc)
            raise ConfigError(msg) from exc
        except StorageError:
            continue
        return


def checked_config(args: argparse.Namespace, *, create: bool = True) -> Sr3Config:
    """Return :func:`cluster_config` once a live ring node accepted its secret.

    Read-only commands pass ``create=False``, as to :func:`open_cluster`.

    Raises:
        ConfigError: see :func:`cluster_config` and :func:`check_secret`.
        CoordinationError: ZooKeeper cannot be reached (or, without
            ``create``, the chroot does not exist).
    """
    config = cluster_config(args)
    with open_cluster(config, create=create) as cluster:
        check_secret(cluster, secret_source(args))
    return config


def secret_source(args: argparse.Namespace) -> str:
    """Say where the command's ring secret comes from, for error messages."""
    if getattr(args, "secret_file", None):
        return f"--secret-file {args.secret_file}"
    if not getattr(args, "zk", None) and resolve_lab_dir(getattr(args, "lab", None)):
        return "the lab's secret file"
    if os.environ.get("SR3_NODE_SECRET"):
        return "SR3_NODE_SECRET"
    return "no secret given"


def wait_for_members(lab: Lab, count: int, timeout_s: float = 30.0) -> None:
    """Wait until ``count`` nodes are registered in the lab's ZooKeeper.

    Raises:
        SR3Error: they did not all register in time.
    """
    with open_cluster(lab.config()) as cluster:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(cluster.membership.members()) >= count:
                return
            time.sleep(0.05)  # a poll interval bounded by the deadline, not a wait
        have = sorted(cluster.membership.members())
    msg = (
        f"only {len(have)} of {count} ring nodes registered ({have}); "
        "see nodes/*/node.log in the lab dir"
    )
    raise SR3Error(msg)
