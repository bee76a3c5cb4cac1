"""Storm conf merging and the settings the local cluster reads from it."""

from __future__ import annotations

import pytest

from sr3.errors import ConfigError
from storm_bridge.cluster.settings import (
    ClusterOptions,
    TaskSettings,
    component_conf,
    topology_conf,
)
from topology_api.errors import TopologyError
from topology_api.java_hash import IntegerBoxing


def test_precedence() -> None:
    conf = topology_conf(
        "wc",
        {"topology.message.timeout.secs": 10, "x": 1},
        {"topology.message.timeout.secs": 5},
    )
    assert conf["topology.message.timeout.secs"] == 5
    assert conf["topology.name"] == "wc"
    assert conf["x"] == 1
    assert conf["topology.shellbolt.max.pending"] == 100  # Storm default


def test_component_may_override_only_some_storm_keys() -> None:
    topo = topology_conf("wc", {}, {})
    own = {
        "topology.tick.tuple.freq.secs": 2,
        "topology.max.spout.pending": 10,
        "topology.message.timeout.secs": 1,  # Storm drops this one
        "sr3.recovery.mechanism": "line",  # not a Storm key: kept
    }
    conf = component_conf(topo, own)
    assert conf["topology.tick.tuple.freq.secs"] == 2
    assert conf["topology.max.spout.pending"] == 10
    assert conf["topology.message.timeout.secs"] == 30
    assert conf["sr3.recovery.mechanism"] == "line"


def test_defaults() -> None:
    settings = TaskSettings.from_conf(topology_conf("wc", {}, {}))
    assert settings == TaskSettings(
        subprocess_timeout_s=30.0,
        message_timeout_s=30.0,
        message_timeouts=True,
        tick_freq_s=None,
        max_spout_pending=None,
        shellbolt_max_pending=100,
        acker_tasks=1,
        sanity_check=False,
        boxing=IntegerBoxing.LONG,
        idle_quiet_s=2.0,
    )


def test_timeouts_and_ackers() -> None:
    conf = topology_conf(
        "wc",
        {},
        {
            "supervisor.worker.timeout.secs": 9,
            "topology.acker.executors": 0,
            "sr3.storm.json.integer.boxing": "integer",
        },
    )
    settings = TaskSettings.from_conf(conf)
    assert settings.subprocess_timeout_s == 9.0  # fallback key
    assert settings.acker_tasks == 0
    assert settings.boxing is IntegerBoxing.INTEGER
    conf["topology.subprocess.timeout.secs"] = 2
    assert TaskSettings.from_conf(conf).subprocess_timeout_s == 2.0


def test_idle_quiet_period_is_configurable() -> None:
    conf = topology_conf("wc", {"sr3.idle.quiet.s": 5}, {})
    assert TaskSettings.from_conf(conf).idle_quiet_s == 5.0
    conf = topology_conf("wc", {}, {"sr3.idle.quiet.s": 0})
    assert TaskSettings.from_conf(conf).idle_quiet_s == 0.0


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("topology.message.timeout.secs", "30", "non-negative number"),
        ("topology.max.spout.pending", -1, "non-negative integer"),
        ("topology.max.spout.pending", 2.5, "-o topology.max.spout.pending=N"),
        ("topology.enable.message.timeouts", "False", "must be true or false"),
        ("topology.testing.always.try.serialize", "yes", "=false"),
        ("sr3.storm.json.integer.boxing", "short", "'long'"),
        ("sr3.idle.quiet.s", "2", "non-negative number"),
    ],
)
def test_invalid(key: str, value: object, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        TaskSettings.from_conf(topology_conf("wc", {}, {key: value}))


@pytest.mark.parametrize(
    "bad",
    [{"spout_idle_max_s": 0}, {"max_events": 0}, {"restart_backoff_s": -1.0}],
)
def test_cluster_options_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="ClusterOptions"):
        ClusterOptions(**bad)  # type: ignore[arg-type]
