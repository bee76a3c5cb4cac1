"""A lab's ZooKeeper: its own embedded server, or an external one it only uses.

A lab starts its own ZooKeeper under ``<lab>/zk`` (on the lab's host ``h1``
with ``--netns``) unless ``sr3 lab up --zk HOSTS`` gave it one that runs
already (:func:`use_external`): then it never starts or stops it, and its ring
lives under a chroot of its own there, so labs sharing one ZooKeeper never see
each other's rings. :class:`~sr3_cli.lab.Lab` calls these under its lock.
"""

from __future__ import annotations

import logging
import secrets

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.lab_state import LabState
from sr3_cli.labfile import external_zk
from zk.launcher import EmbeddedZooKeeper, port_taken

__all__ = ["start_own", "use_external"]

logger = logging.getLogger(__name__)


def use_external(lab: LabState, hosts: str, *, netns: bool = False) -> None:
    """Make a new ``lab`` use the running ZooKeeper at ``hosts`` (inside its lock).

    ``netns``: the lab is to be built on hosts (``sr3 lab up --netns``), where
    its ZooKeeper runs on one of them: refused, as for a netns lab. The lab
    gets the chroot ``/sr3/lab-<random>`` there. Asking again with the same
    ``hosts`` changes nothing.

    Raises:
        ConfigError: ``hosts`` is not a connect string; the lab already has its
            own ZooKeeper (or nodes started on one) or another external one;
            it is (or is to be) a netns lab.
    """
    try:
        wanted = external_zk(hosts)
    except ValueError as exc:
        msg = f"`sr3 lab up --zk {hosts}`: {exc}"
        raise ConfigError(msg) from exc
    if lab.zk_external == wanted:
        return
    if lab.zk_external or lab.zk_port or lab.nodes:
        now = (
            f"the ZooKeeper at {lab.zk_external}"
            if lab.zk_external
            else "a ZooKeeper of its own"
        )
        msg = (
            f"the lab in {lab.root} already uses {now}; `--zk {hosts}` applies "
            "only to a new lab: give `sr3 lab up --dir` another directory, or "
            "leave out --zk"
        )
        raise ConfigError(msg)
    if netns or lab.netns is not None:
        msg = (
            "a netns lab runs its ZooKeeper on one of its hosts; "
            f"`--zk {hosts}` cannot be combined with --netns"
        )
        raise ConfigError(msg)
    lab.zk_external = wanted
    lab.chroot = f"/sr3/lab-{secrets.token_hex(4)}"


def start_own(lab: LabState) -> None:
    """Start the lab's own ZooKeeper (inside its lock; the same port on restart).

    One that runs from the lab's zk dir but is missing from lab.json (a stale
    copy written back by hand) is adopted, not started twice.

    Raises:
        ZooKeeperMissingError: java or ZooKeeper is not installed.
        CoordinationError: it did not start (the message quotes its log).
    """
    zk_dir = lab.root / "zk"
    running = EmbeddedZooKeeper.detached_pid(zk_dir)
    hosts = EmbeddedZooKeeper.detached_hosts(zk_dir)
    if running is not None and hosts is not None:
        logger.warning(
            "lab.json did not list the lab's running ZooKeeper (pid %s); adopting it",
            running,
        )
        lab.zk_pid, lab.zk_port = running, int(hosts.rsplit(":", 1)[1])
        return
    if lab.zk_port and lab.netns is None and port_taken(lab.zk_port):
        # ZooKeeper keeps its data across ports; only `--zk` users must follow
        logger.warning(
            "the lab's ZooKeeper port %s is taken by another process; it "
            "listens on a new one (`--zk` users: see the address printed)",
            lab.zk_port,
        )
        lab.zk_port = 0
    where = lab_netns.zk_placement(lab)
    zk = EmbeddedZooKeeper(
        zk_dir,
        port=lab.zk_port,
        detached=True,
        host=where.address if where else "127.0.0.1",
        command_prefix=where.prefix if where else (),
    )
    zk.start()
    lab.zk_port = zk.port
    lab.zk_pid = zk.pid
