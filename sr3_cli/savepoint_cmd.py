"""``sr3 savepoint create|list|delete``: named, GC-pinned commit records of a topology.

A savepoint keeps the topology's committed epoch (offsets, owners and every
shard of their chains) until it is deleted; ``sr3 run FILE --from-savepoint
NAME`` starts a run from it, on the Storm or the Spark engine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from backend.access import RingAccess
from backend.committer import take_savepoint
from sr3.errors import ConfigError
from sr3_cli.cluster import checked_config
from sr3_cli.output import emit_json, table
from zk.savepoints import Savepoint

__all__ = ["create", "delete", "list_savepoints"]


@contextmanager
def _ring(args: argparse.Namespace) -> Iterator[RingAccess]:
    # an existing cluster only: a mistyped chroot must not become a new one
    ring = RingAccess(checked_config(args, create=False), create=False)
    try:
        yield ring
    finally:
        ring.close()


def _row(point: Savepoint) -> list[Any]:
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(point.created_at))
    return [point.name, point.record.epoch, len(point.record.owners), created]


def create(args: argparse.Namespace) -> int:
    """``sr3 savepoint create``: pin the topology's committed epoch under a name."""
    with _ring(args) as ring:
        point = take_savepoint(ring, args.topology, args.name)
    if args.json:
        emit_json(point.to_dict())
        return 0
    print(
        f"savepoint {point.name!r} of {point.topology!r}: epoch "
        f"{point.record.epoch}, {len(point.record.owners)} owners; start from it "
        f"with: sr3 run FILE --from-savepoint {point.name}"
    )
    return 0


def list_savepoints(args: argparse.Namespace) -> int:
    """``sr3 savepoint list``: the topology's savepoints, oldest epoch first."""
    with _ring(args) as ring:
        points = ring.savepoints.savepoints(args.topology)
    if args.json:
        emit_json([p.to_dict() for p in points])
        return 0
    if not points:
        print(f"topology {args.topology!r} has no savepoints")
        return 0
    print(table(["NAME", "EPOCH", "OWNERS", "CREATED"], [_row(p) for p in points]))
    return 0


def delete(args: argparse.Namespace) -> int:
    """``sr3 savepoint delete``: unpin a savepoint (a later collection frees it).

    Raises:
        ConfigError: no such savepoint; the message lists the known ones.
    """
    with _ring(args) as ring:
        if not ring.savepoints.delete(args.topology, args.name):
            known = [repr(p.name) for p in ring.savepoints.savepoints(args.topology)]
            msg = (
                f"topology {args.topology!r} has no savepoint {args.name!r}; its "
                f"savepoints: {', '.join(known) or 'none'}"
            )
            raise ConfigError(msg)
    if args.json:
        emit_json({"deleted": args.name, "topology": args.topology})
        return 0
    print(
        f"savepoint {args.name!r} of {args.topology!r} deleted; the next epoch's "
        "collection frees what only it kept"
    )
    return 0
