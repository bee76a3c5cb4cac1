"""Znode layout of one SR3 cluster: the only place znode paths are built.

Every path returned here is relative to the cluster's chroot, which is how the
chrooted kazoo client of :mod:`zk.client` sees the tree::

    /members/<node id>                       ephemeral, NodeInfo
    /election/c-<sequence>                   ephemeral sequential, contender id
    /owners/<owner>                          {"key_group_count": G, "latest": e}
    /owners/<owner>/epochs/<epoch:010d>      Manifest
    /owners/<owner>/shards/<shard id>        ShardMeta
    /topologies/<name>                       topology metadata
    /topologies/<name>/committed             last globally committed epoch
    /topologies/<name>/savepoints/<savepoint>    a named, pinned commit record
    /topologies/<name>/retained/<epoch:010d>     a commit record kept restorable
    /topologies/<name>/live                  ephemeral: a running run's components
    /topologies/<name>/rebalance             the last `sr3 rebalance` request
    /topologies/<name>/native/control        native mode: phase, epoch, generation
    /topologies/<name>/native/generation     native checkpoints: rollback counter
    /topologies/<name>/native/coordinator    ephemeral, the coordinating spout task
    /topologies/<name>/native/tasks/<kind>/<name>    registered spout tasks, owners
    /topologies/<name>/native/reports/<step>/<name>  what each task reported
    /ring/meta                               reserved for ring parameters

Node ids, owner names and shard ids may contain ``/``, ``@`` and ``#``; they are
percent-quoted into one path segment by :func:`quote_name` and read back with
:func:`unquote_name`.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from sr3.errors import CoordinationError

__all__ = ["CONTENDER_PREFIX", "ZkPaths", "quote_name", "unquote_name"]

CONTENDER_PREFIX = "c-"
_EPOCH_DIGITS = 10
# "." and ".." are reserved znode names, and urllib leaves dots unquoted.
_RESERVED = {".": "%2E", "..": "%2E%2E"}


def _invalid(msg: str) -> CoordinationError:
    err = CoordinationError(msg)
    err.retriable = False
    return err


def quote_name(name: str) -> str:
    """Return ``name`` as a single, reversible znode path segment.

    Raises:
        CoordinationError: ``name`` is empty (not retriable).
    """
    if not name:
        msg = "an empty name cannot be a znode; give the node, owner or shard an id"
        raise _invalid(msg)
    return _RESERVED.get(name) or quote(name, safe="")


def unquote_name(segment: str) -> str:
    """Return the name that :func:`quote_name` turned into ``segment``."""
    return unquote(segment, errors="strict")


class ZkPaths:
    """Builds the chroot-relative znode paths of one cluster.

    Args:
        chroot: The cluster's root on the server, e.g. ``/sr3/default``; used for
            :meth:`absolute` (messages) and by :func:`zk.client.connect`.

    Raises:
        CoordinationError: ``chroot`` is not absolute or ends with ``/``.
    """

    members = "/members"
    election = "/election"
    owners = "/owners"
    topologies = "/topologies"
    ring_meta = "/ring/meta"

    def __init__(self, chroot: str) -> None:
        if not chroot.startswith("/") or (chroot != "/" and chroot.endswith("/")):
            msg = (
                f"ZooKeeper chroot {chroot!r} is invalid; set sr3.zk.chroot to an "
                "absolute path without a trailing slash, as /sr3/default"
            )
            raise _invalid(msg)
        self.chroot = chroot

    def __repr__(self) -> str:
        return f"ZkPaths({self.chroot!r})"

    def absolute(self, path: str) -> str:
        """Return the server-side path of chroot-relative ``path`` (for messages)."""
        if self.chroot == "/":
            return path
        return self.chroot if path == "/" else self.chroot + path

    def member(self, node_id: str) -> str:
        """Return the ephemeral membership znode of ``node_id``."""
        return f"{self.members}/{quote_name(node_id)}"

    def contender(self) -> str:
        """Return the prefix of election contender znodes (sequence appended)."""
        return f"{self.election}/{CONTENDER_PREFIX}"

    def owner(self, owner: str) -> str:
        """Return the znode holding ``owner``'s G and latest epoch."""
        return f"{self.owners}/{quote_name(owner)}"

    def epochs(self, owner: str) -> str:
        """Return the parent of ``owner``'s manifests."""
        return f"{self.owner(owner)}/epochs"

    def epoch(self, owner: str, epoch: int) -> str:
        """Return the manifest znode of ``owner`` at ``epoch`` (10 digits, padded).

        Raises:
            CoordinationError: ``epoch`` is negative or too large (not retriable).
        """
        if not 0 <= epoch < 10**_EPOCH_DIGITS:
            msg = f"epoch {epoch} of owner {owner!r} is outside 0..9999999999"
            raise _invalid(msg)
        return f"{self.epochs(owner)}/{epoch:0{_EPOCH_DIGITS}d}"

    def shards(self, owner: str) -> str:
        """Return the parent of ``owner``'s shard records."""
        return f"{self.owner(owner)}/shards"

    def shard(self, owner: str, shard_id: str) -> str:
        """Return the record of shard ``shard_id`` written by ``owner``."""
        return f"{self.shards(owner)}/{quote_name(shard_id)}"

    def topology(self, name: str) -> str:
        """Return the root of topology ``name``'s metadata."""
        return f"{self.topologies}/{quote_name(name)}"

    def committed(self, name: str) -> str:
        """Return the znode holding topology ``name``'s last committed epoch."""
        return f"{self.topology(name)}/committed"

    def retained(self, name: str) -> str:
        """Return the parent of topology ``name``'s retained commit records."""
        return f"{self.topology(name)}/retained"

    def retained_epoch(self, name: str, epoch: int) -> str:
        """Return the retained commit record of ``epoch`` (10 digits, padded)."""
        return f"{self.retained(name)}/{epoch:010d}"

    def savepoints(self, name: str) -> str:
        """Return the parent of topology ``name``'s savepoints."""
        return f"{self.topology(name)}/savepoints"

    def savepoint(self, name: str, savepoint: str) -> str:
        """Return the znode of savepoint ``savepoint`` of topology ``name``."""
        return f"{self.savepoints(name)}/{quote_name(savepoint)}"

    def live(self, name: str) -> str:
        """Return the ephemeral znode of topology ``name``'s running run."""
        return f"{self.topology(name)}/live"

    def rebalance(self, name: str) -> str:
        """Return the znode of topology ``name``'s last rebalance request."""
        return f"{self.topology(name)}/rebalance"

    def native(self, name: str) -> str:
        """Return the root of topology ``name``'s native-mode checkpoint znodes."""
        return f"{self.topology(name)}/native"

    def native_control(self, name: str) -> str:
        """Return the znode holding the native protocol's phase, epoch, generation."""
        return f"{self.native(name)}/control"

    def native_generation(self, name: str) -> str:
        """Return the counter a (re)started task bumps to ask for a rollback."""
        return f"{self.native(name)}/generation"

    def native_coordinator(self, name: str) -> str:
        """Return the ephemeral znode held by the coordinating spout task."""
        return f"{self.native(name)}/coordinator"

    def native_tasks(self, name: str, kind: str) -> str:
        """Return the parent of the registered tasks of ``kind`` (spout, owner)."""
        return f"{self.native(name)}/tasks/{quote_name(kind)}"

    def native_task(self, name: str, kind: str, task: str) -> str:
        """Return the registration znode of ``task`` (a spout task or an owner)."""
        return f"{self.native_tasks(name, kind)}/{quote_name(task)}"

    def native_reports(self, name: str) -> str:
        """Return the parent of every step's reports."""
        return f"{self.native(name)}/reports"

    def native_step(self, name: str, step: str) -> str:
        """Return the parent of the reports of one step (``pause-<g>-<e>``...)."""
        return f"{self.native_reports(name)}/{quote_name(step)}"

    def native_report(self, name: str, step: str, task: str) -> str:
        """Return ``task``'s report of ``step``."""
        return f"{self.native_step(name, step)}/{quote_name(task)}"

    @staticmethod
    def epoch_of(segment: str) -> int:
        """Return the epoch encoded in an ``epochs`` child name.

        Raises:
            CoordinationError: ``segment`` is not a padded epoch (not retriable).
        """
        if len(segment) != _EPOCH_DIGITS or not segment.isdigit():
            msg = f"znode {segment!r} under an epochs dir is not a 10-digit epoch"
            raise _invalid(msg)
        return int(segment)

    @staticmethod
    def sequence_of(segment: str) -> int:
        """Return the sequence number of an election contender child name.

        Raises:
            CoordinationError: ``segment`` is not a contender name (not retriable).
        """
        digits = segment.removeprefix(CONTENDER_PREFIX)
        if digits == segment or not digits.isdigit():
            msg = f"znode {segment!r} under the election dir is not a contender"
            raise _invalid(msg)
        return int(digits)
