"""Link shapes and host placement of the netns lab (pure: no ``ip``, no ``tc``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr3.errors import ConfigError
from sr3_cli import netns
from sr3_cli.lab_netns import (
    daemon_host,
    driver_address,
    host_names,
    node_host,
    prefix_for,
)
from sr3_cli.netns import LinkShape


def test_a_shape_parses_rate_delay_and_loss_in_any_order() -> None:
    shape = LinkShape.parse("loss=0.5%, delay=20ms,rate=100mbit")
    assert shape == LinkShape(rate="100mbit", delay_ms=20.0, loss_pct=0.5)
    assert str(shape) == "rate=100mbit,delay=20ms,loss=0.5%"
    assert shape.qdisc() == [
        "tbf", "rate", "100mbit", "burst", "64kb", "latency", "200ms",
    ]  # fmt: skip


def test_delay_and_loss_of_both_links_are_applied_where_a_packet_arrives() -> None:
    shape = LinkShape.parse("delay=10ms,loss=10%")
    assert shape.needs_netfilter
    assert shape.qdisc() is None  # no rate: no tbf
    assert shape.arrival_delay_ms() == 20.0  # the sender's link and this one
    assert shape.arrival_loss() == pytest.approx(0.19)  # lost on either link
    drop, queue = shape.netfilter_rules("eth0")
    assert drop[-2:] == ["-j", "DROP"]
    assert drop[drop.index("--probability") + 1] == "0.190000"
    assert queue[queue.index("-j") :] == [
        "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass",
    ]  # fmt: skip
    assert all(rule[rule.index("-i") + 1] == "eth0" for rule in (drop, queue))


def test_rate_alone_is_tbf_and_nothing_is_unshaped() -> None:
    assert LinkShape.parse("rate=1gbit").qdisc() == [
        "tbf", "rate", "1gbit", "burst", "64kb", "latency", "200ms",
    ]  # fmt: skip
    rate_only = LinkShape.parse("rate=1gbit,loss=0%")
    assert not rate_only.needs_netfilter
    assert rate_only.netfilter_rules("eth0") == []
    assert LinkShape.parse("").qdisc() is None
    assert str(LinkShape.parse("")) == "unshaped"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("rate=fast", "rate 'fast' is no tc rate"),
        ("delay=20", "delay '20' is not milliseconds"),
        ("loss=150%", "loss '150%' is not a percentage"),
        ("jitter=5ms", "'jitter=5ms' is not one of rate=, delay=, loss="),
        ("rate=1mbit,rate=2mbit", "'rate=2mbit' is not one of"),
    ],
)
def test_a_bad_shape_is_refused_naming_the_part_and_the_syntax(
    text: str, named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        LinkShape.parse(text)
    assert named in str(caught.value)
    assert "rate=RATE (as 100mbit" in str(caught.value)


def test_zookeeper_gets_h1_and_nodes_spread_over_the_other_hosts() -> None:
    record = {"hosts": {h: "" for h in host_names(4)}}
    placed = [node_host(record, f"node-{i}") for i in range(1, 8)]
    assert placed == ["h2", "h3", "h4", "h2", "h3", "h4", "h2"]
    assert node_host({"hosts": {"h1": ""}}, "node-3") == "h1"


def test_control_daemons_get_h1_and_spark_workers_share_the_node_hosts() -> None:
    record = {"hosts": {h: "" for h in host_names(4)}}
    assert [daemon_host(record, d) for d in ("nimbus", "spark-master", "kafka")] == [
        "h1",
        "h1",
        "h1",
    ]
    workers = [daemon_host(record, f"spark-worker-{i}") for i in (1, 2)]
    assert workers == [node_host(record, "node-1"), node_host(record, "node-2")]


class _Lab:
    def __init__(self, netns: dict[str, object] | None) -> None:
        self.root = Path("/nowhere")
        self.netns = netns


def test_a_driver_binds_the_bridge_only_for_a_master_on_the_labs_hosts() -> None:
    lab = _Lab({"network": "10.77.5.0/24", "gateway": "10.77.5.254", "hosts": {}})
    assert driver_address(lab, "spark://10.77.5.1:7077") == "10.77.5.254"
    assert driver_address(lab, "spark://127.0.0.1:7077") is None
    assert driver_address(lab, "local[2]") is None
    assert driver_address(lab, "spark://master.example:7077") is None
    assert driver_address(_Lab(None), "spark://10.77.5.1:7077") is None


def test_a_lab_prefix_is_stable_short_and_never_the_benchmarks(tmp_path: Path) -> None:
    prefix = prefix_for(tmp_path / "lab")
    assert prefix == prefix_for(tmp_path / "lab")
    assert prefix != prefix_for(tmp_path / "other")
    assert len(prefix) == 7
    assert prefix.startswith("sr3")
    int(prefix[3:], 16)  # hex digits: never the benchmark's "sr3r"
    # the longest interface name built from it (veth peer of h32) fits IFNAMSIZ
    assert len(prefix + "h32" + "p") <= 15


def test_delay_without_iptables_is_refused_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None)
    with pytest.raises(ConfigError) as caught:
        netns.shape_link(LinkShape.parse("delay=5ms"), veth="sr3xh1", ns="sr3x-h1")
    assert "`apt-get install iptables`" in str(caught.value)
    assert "`--netem rate=100mbit`" in str(caught.value)
