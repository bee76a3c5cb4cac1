"""State holding ints beyond 64 bits checkpoints, commits and restores exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sr3.config import Sr3Config
from sr3_cli.lab import Lab
from storm_bridge.runner import RunOptions, TaskKill, run_topology
from storm_bridge.wiring import RingAccess

TOPOLOGIES = Path(__file__).parent / "topologies"
pytestmark = [pytest.mark.storm, pytest.mark.zk, pytest.mark.slow]
#: Spouts dry this long (not the default 2 s) end a run: these never pause.
QUIET_S = 0.5


def expected_products(count: int) -> dict[str, int]:
    products: dict[str, int] = {}
    for n in range(count):
        key = f"k{n % 4}"
        products[key] = products.get(key, 1) * (n + 1_000_003) % (2**521 - 1)
    return products


def test_a_state_of_big_ints_survives_a_kill(lab: Lab) -> None:
    # before, the first checkpoint failed ("Integer value out of range") and the
    # run rolled back to the empty epoch over and over until its timeout
    count = 3000
    ring = RingAccess(lab.config(Sr3Config()))
    options = RunOptions(
        until_idle=True,
        conf={
            "sbt.count": count,
            "topology.max.spout.pending": 100,
            "sr3.idle.quiet.s": QUIET_S,
        },
        kills=[TaskKill("product", 1, at_s=2.0)],
        timeout_s=120.0,
    )
    try:
        report = run_topology(
            TOPOLOGIES / "sbt_big_ints.py", ring=ring, options=options
        )
        _, state = ring.committed_state("sbt_big_ints", "product")
    finally:
        ring.close()
    assert report.idle is True
    assert [r["cause"] for r in report.recoveries] == ["product:1"]
    products = expected_products(count)
    assert max(abs(p) for p in products.values()).bit_length() > 64
    assert {key[0]: fields["product"] for key, fields in state.items()} == products
    assert all(
        fields["history"][-1] == -products[key[0]] for key, fields in state.items()
    )


@pytest.mark.parametrize("boxing", ["long", "integer"])
def test_a_rescaled_bolt_keeps_every_key_under_either_integer_boxing(
    lab: Lab, boxing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the router hashes int keys as Storm 2.6's json-smart does with `integer`;
    # a task restored after a rescale kept the keys Long hashing sends it, so
    # negative keys landed on one task and their counts on another
    ring = RingAccess(lab.config(Sr3Config()))
    conf = {"sr3.storm.json.integer.boxing": boxing, "sr3.idle.quiet.s": QUIET_S}
    topology = TOPOLOGIES / "sbt_boxed_keys.py"
    try:
        monkeypatch.setenv("SBT_COUNT_PAR", "2")
        first = RunOptions(until_idle=True, conf={**conf, "sbt.count": 100})
        run_topology(topology, ring=ring, options=first)
        monkeypatch.setenv("SBT_COUNT_PAR", "3")
        # load the topology file again, as a second `sr3 run` would
        monkeypatch.delitem(sys.modules, "sbt_boxed_keys", raising=False)
        again = RunOptions(
            until_idle=True, resume=True, conf={**conf, "sbt.count": 200}
        )
        report = run_topology(topology, ring=ring, options=again)
        _, state = ring.committed_state("sbt_boxed_keys", "count")
        record = ring.committed("sbt_boxed_keys")
    finally:
        ring.close()
    assert report.idle is True
    assert record is not None
    assert sorted(o for o in record.owners if "/count/" in o) == [
        f"sbt_boxed_keys/count/{i}" for i in range(3)
    ]
    keys = [-3, -2, -1, 0, 1, 2, 3, 2**31, -(2**31) - 1, 10**12]
    assert {key[0]: fields["n"] for key, fields in state.items()} == {
        k: 20 for k in keys
    }
