"""``run_topology`` reports Storm's complete latency of the tuple trees it acked.

Word count on the local cluster, without checkpoints (ZooKeeper only). Its
spout emits without message ids (SR3 replays from checkpoints, not from acks),
so, as Storm samples its statistics, every twentieth emit's tree is tracked
for its latency alone (``topology.stats.sample.rate``, default 0.05); at rate 1
every emit is. Each tracked tree's time from emit to ack is in the report, over
all spouts and by spout; the spout is told nothing of them.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3.config import Sr3Config, ZkConfig
from storm_bridge.runner import RunOptions, run_topology
from storm_bridge.wiring import RingAccess
from topology_api.topology import load_topology

pytestmark = [pytest.mark.zk, pytest.mark.storm]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
LINES = 600
CONF = {"wordcount.lines": LINES, "sr3.idle.quiet.s": 0.5}


@pytest.fixture
def ring(zk_config: ZkConfig) -> Iterator[RingAccess]:
    access = RingAccess(Sr3Config(zk=zk_config))
    yield access
    access.close()


def run(ring: RingAccess, **conf: Any) -> dict[str, Any]:
    conf = {**CONF, **conf}
    options = RunOptions(until_idle=True, checkpoints=False, conf=conf, timeout_s=60.0)
    return run_topology(WORDCOUNT, ring=ring, options=options).to_dict()


@pytest.mark.parametrize(("rate", "trees"), [(None, LINES // 20), (1.0, LINES)])
def test_the_sampled_trees_have_their_complete_latency_reported(
    ring: RingAccess, rate: float | None, trees: int
) -> None:
    conf = {} if rate is None else {"topology.stats.sample.rate": rate}
    report = run(ring, **conf)
    assert report["counters"]["lines"]["spout_emitted"] == LINES
    assert report["counters"]["lines"]["acked"] == 0  # no message ids: no acks
    latency = report["complete_latency_ms"]
    assert latency["count"] == trees
    assert 0 <= latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    assert report["spout_latency_ms"] == {"lines": latency}  # the only spout
    # the tracked trees' words were counted as the others, once
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    words = Counter(w for line in module.corpus_from_conf(CONF) for w in line.split())
    assert report["outputs"]["count"] == {
        json.dumps([w]): [w, n] for w, n in sorted(words.items())
    }


def test_rate_zero_samples_nothing(ring: RingAccess) -> None:
    latency = run(ring, **{"topology.stats.sample.rate": 0})["complete_latency_ms"]
    assert latency == {"p50": None, "p90": None, "p99": None, "max": None, "count": 0}
