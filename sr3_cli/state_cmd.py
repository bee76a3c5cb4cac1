"""``sr3 state dump``: the last committed state of a component.

It reads the ring only, so this module imports the ring access and the lab,
not the local cluster, the engines or streamparse that ``sr3 run`` needs: the
tests call it after nearly every run.
"""

from __future__ import annotations

import argparse
import sys

from sr3_cli.cluster import checked_config
from sr3_cli.output import emit_json
from storm_bridge.wiring import RingAccess

__all__ = ["state_dump"]


def state_dump(args: argparse.Namespace) -> int:
    """``sr3 state dump``: the last committed state of a component.

    Prints ``{key: {name: value}}`` as JSON, each key a JSON list of its values
    (with or without ``--json``; without it, a summary line goes to stderr).
    """
    ring = RingAccess(checked_config(args, create=False), create=False)
    try:
        epoch, rows = ring.committed_dump(args.topology, args.component)
    finally:
        ring.close()
    if args.json:
        emit_json(rows)
        return 0
    print(
        f"# {args.topology}/{args.component}: {len(rows)} keys at committed "
        f"epoch {epoch}",
        file=sys.stderr,
    )
    emit_json(rows)
    return 0
