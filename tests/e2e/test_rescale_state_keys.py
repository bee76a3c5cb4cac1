"""Redeploying a stateful topology at another parallelism keeps every key exact.

The topology (``topologies/state_keys.py``) has two counters behind
``fields("user")``: one keyed by the grouping values, one whose ``state_key``
is ``(user, page)``. Each step runs it with ``sr3 run -e pN --resume`` on more
events: the committed state of both counters must be the exact counts whatever
the parallelism went from, with the local cluster's checkpoints and with native
mode's (the tasks' own, as on real Storm). Real ZooKeeper, real ring node
processes, the local multilang cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab
from tests.e2e.conftest import sr3_json
from tests.e2e.topologies.state_keys import expected

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "state_keys.py"
#: (environment, events so far): parallelism 2 -> 3 -> 1 -> 4
STEPS = (("p2", 300), ("p3", 600), ("p1", 900), ("p4", 1200))


def dumped(lab: Lab, component: str) -> dict[str, Any]:
    """Return ``sr3 state dump`` of ``component`` as ``{json key: fields}``."""
    return dict(
        sr3_json(
            lab, "state", "dump", "--topology", "state_keys", "--component", component
        )
    )


def as_dump(counts: Counter[Any]) -> dict[str, Any]:
    """Return exact counts as ``sr3 state dump`` prints them."""
    return {
        json.dumps(list(key) if isinstance(key, tuple) else [key]): {"n": n}
        for key, n in counts.items()
    }


@pytest.mark.parametrize("mode", ["local", "native"])
def test_state_keys_stay_exact_through_2_3_1_4_tasks_on_the_storm_engine(
    lab_factory: Any, mode: str
) -> None:
    lab = lab_factory(nodes=3)
    # native: the tasks checkpoint and restore through ZooKeeper on their own,
    # as on a real Storm cluster
    for step, (environment, events) in enumerate(STEPS):
        resume = ["--resume"] if step else []
        report = sr3_json(
            lab,
            "run",
            str(TOPOLOGY),
            "-e",
            environment,
            "--until-idle",
            *resume,
            "-o",
            f"statekeys.events={events}",
            "-o",
            "sr3.checkpoint.interval.s=0.3",
            "-o",
            f"sr3.checkpoint.mode={mode}",
        )
        assert report["idle"], report
        users, pages = expected(events)
        where = f"after {environment} ({events} events)"
        assert dumped(lab, "per_user") == as_dump(users), where
        assert dumped(lab, "per_page") == as_dump(pages), where
