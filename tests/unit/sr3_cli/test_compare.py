"""``sr3 compare`` refuses what it cannot run, with exit 2, before running anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sr3_cli.main import main

WORDCOUNT = str(Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py")


def test_an_unknown_engine_is_named_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["compare", WORDCOUNT, "--engines", "storm,flink"]) == 2

    err = capsys.readouterr().err
    assert "unknown engine 'flink'" in err
    assert "storm, spark, apache-storm" in err


def test_one_engine_is_no_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", WORDCOUNT, "--engines", "spark"]) == 2

    assert "two or more different engines" in capsys.readouterr().err


def test_a_missing_topology_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.py"

    assert main(["compare", str(missing), "--out", str(tmp_path / "out")]) == 2

    assert "nope.py" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_netem_needs_the_netns_lab(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", WORDCOUNT, "--netem", "delay=20ms"]) == 2

    err = capsys.readouterr().err
    assert "--netem needs the network-namespace lab" in err
    assert "sr3 lab up --netns" in err


def test_apache_storm_needs_a_lab_with_storm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SR3_LAB", raising=False)

    assert main(["compare", WORDCOUNT, "--engines", "storm,apache-storm"]) == 2

    assert "sr3 lab up --storm" in capsys.readouterr().err


KAFKA_WC = Path(WORDCOUNT).with_name("kafka_wordcount.py")


def test_a_kafka_topology_reads_the_labs_broker_and_its_sink_is_not_compared() -> None:
    from types import SimpleNamespace

    from sr3_cli.compare import CompareRequest, compared_components, with_lab_kafka
    from topology_api.topology import load_topology

    topology = load_topology(KAFKA_WC)
    lab: Any = SimpleNamespace(kafka={"bootstrap": "10.0.0.1:9092"})
    request = CompareRequest(file=KAFKA_WC, engines=("storm", "spark"))

    # every engine reads the lab's broker: Kafka is their common input
    assert with_lab_kafka(request, topology, lab).conf == {
        "sr3.kafka.bootstrap": "10.0.0.1:9092"
    }
    # a broker the user names wins; a lab without Kafka changes nothing
    named = CompareRequest(
        file=KAFKA_WC, engines=("storm", "spark"), conf={"sr3.kafka.bootstrap": "h:1"}
    )
    assert with_lab_kafka(named, topology, lab) is named
    assert with_lab_kafka(request, topology, SimpleNamespace(kafka=None)) is request
    # the sink's pending outputs are delivery bookkeeping, the counts are state
    assert compared_components(topology) == ["count"]


def test_a_topology_without_kafka_ignores_the_labs_broker() -> None:
    from types import SimpleNamespace

    from sr3_cli.compare import CompareRequest, with_lab_kafka
    from topology_api.topology import load_topology

    request = CompareRequest(file=Path(WORDCOUNT), engines=("storm", "spark"))
    lab: Any = SimpleNamespace(kafka={"bootstrap": "10.0.0.1:9092"})

    assert with_lab_kafka(request, load_topology(WORDCOUNT), lab) is request


def test_each_engine_writes_its_own_kafka_sink_topic_unless_one_is_named() -> None:
    from sr3_cli.compare_kafka import sink_topics  # noqa: PLC0415 (pyspark)
    from topology_api.topology import load_topology  # noqa: PLC0415

    topology = load_topology(KAFKA_WC)
    conf = {"sr3.kafka.bootstrap": "10.0.0.1:9092"}

    sinks = sink_topics(topology, conf)

    assert sinks is not None
    assert sinks.per_engine
    assert sinks.base == {"results": "counts"}
    assert sinks.conf(conf, "spark") == {**conf, "sr3.kafka.sink.topic": "counts-spark"}
    assert sinks.topic("results", "storm") == "counts-storm"
    # -o sr3.kafka.sink.topic: every engine writes that one topic, as before
    named = {**conf, "sr3.kafka.sink.topic": "out"}
    shared = sink_topics(topology, named)
    assert shared is not None
    assert not shared.per_engine
    assert shared.conf(named, "spark") == named
    assert shared.topic("results", "spark") == "out"
    # no broker known: nothing to read
    assert sink_topics(topology, {}) is None


def test_the_verdict_compares_each_engines_kafka_records_key_by_key() -> None:
    from sr3_cli.compare_verdict import verdict  # noqa: PLC0415

    def run(rows: dict[str, Any]) -> dict[str, Any]:
        kafka = {"results": {"topic": "t", "records": 0, "rows": rows}}
        return {"state": {}, "report": {}, "kafka": kafka}

    once = {"a": [{"word": "a", "count": 1}, {"word": "a", "count": 2}]}
    twice = {"a": [*once["a"], {"word": "a", "count": 2}]}
    same = {
        "engines": ["storm", "spark"],
        "runs": {"storm": run(once), "spark": run(once)},
    }
    differ = {
        "engines": ["storm", "spark"],
        "runs": {"storm": run(once), "spark": run(twice)},
    }

    assert verdict(same)["agree"] is True
    found = verdict(differ)
    assert found["agree"] is False
    (difference,) = found["differences"]
    assert difference["what"] == "kafka"
    assert difference["component"] == "results"
    assert difference["first_keys"][0]["spark"] == twice["a"]
    # results written before this change have no "kafka": nothing compared
    old = {
        "engines": ["storm", "spark"],
        "runs": {
            "storm": {"state": {}, "report": {}},
            "spark": {"state": {}, "report": {}},
        },
    }
    assert verdict(old) == {
        "agree": True,
        "reference": "storm",
        "compared": [],
        "differences": [],
    }
