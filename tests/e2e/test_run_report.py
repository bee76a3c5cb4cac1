"""`sr3 run --until-idle` reports every recovery it caused, even late ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sr3_cli.lab import Lab
from tests.e2e.conftest import sr3_json

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

WORDCOUNT = Path(__file__).resolve().parents[2] / "topologies" / "wordcount.py"


def test_a_kill_after_the_spouts_are_dry_is_recovered_before_the_run_ends(
    lab_factory: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch
) -> None:
    # relayed recovery frames are slowed, so the restore surely outlasts the
    # moment the cluster first looks idle again after the kill
    monkeypatch.setenv("SR3_TEST_RELAY_FAULTS", "delay_s=0.3")
    lab = lab_factory(nodes=3)
    clean = sr3_json(
        lab, "run", str(WORDCOUNT), "--until-idle", "-o", "wordcount.lines=300"
    )
    truth = sr3_json(
        lab, "state", "dump", "--topology", "wordcount", "--component", "count"
    )
    # a run that goes idle within a few seconds; the kill lands well after that
    late = clean["seconds"] + 4.0
    report = sr3_json(
        lab,
        "run",
        str(WORDCOUNT),
        "--until-idle",
        "-o",
        "wordcount.lines=300",
        "--kill",
        f"count:0@{late:.1f}",
    )
    assert report["idle"] is True
    (recovery,) = report["recoveries"]
    assert recovery["cause"] == "count:0"
    assert recovery["timeline"]["restore_s"] is not None
    assert recovery["timeline"]["replay_s"] is not None
    assert recovery["used"] != "none"
    state = sr3_json(
        lab, "state", "dump", "--topology", "wordcount", "--component", "count"
    )
    assert state == truth
