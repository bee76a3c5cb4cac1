"""A throw-away lab for one benchmark run: embedded ZooKeeper plus ring nodes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sr3_cli.commands import wait_for_members
from sr3_cli.lab import Lab


@contextmanager
def bench_lab(nodes: int, *, log_level: str = "WARNING") -> Iterator[Lab]:
    """Start ZooKeeper and ``nodes`` ring nodes in a temporary dir; stop and
    delete them all on exit (1 GB snapshots times 3 replicas fill a disk)."""
    with tempfile.TemporaryDirectory(prefix="sr3-bench-") as tmp:
        lab = Lab(root=Path(tmp) / "lab")
        lab.root.mkdir()
        lab.save()
        lab.start_zookeeper()
        try:
            lab.add_nodes(nodes)
            lab.start_nodes(sorted(lab.nodes), log_level=log_level)
            wait_for_members(lab, nodes)
            yield lab
        finally:
            lab.stop_nodes()
            lab.stop_zookeeper()
