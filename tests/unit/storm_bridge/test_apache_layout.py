"""Placing a Storm cluster's daemons on hosts (netns lab): cluster.json, storm.yaml."""

from __future__ import annotations

import json
from pathlib import Path

from sr3.jvm import LAB_JVM_FLAGS
from storm_bridge.apache.layout import place
from storm_bridge.apache.state import (
    DaemonHost,
    StormClusterInfo,
    SupervisorInfo,
    cluster_conf,
)


def _info(root: Path) -> StormClusterInfo:
    sups = tuple(
        SupervisorInfo(index=i, local_dir=str(root / f"s{i}"), slots=(7000 + i,),
                       thrift_port=7100 + i)
        for i in (1, 2)
    )  # fmt: skip
    return StormClusterInfo(
        version="2.8.3", storm_home="/storm", conf_file=str(root / "storm.yaml"),
        zk_hosts="10.77.1.1:2181", zk_root="/storm", nimbus_port=6627,
        supervisors=sups,
    )  # fmt: skip


def test_placed_daemons_bind_and_announce_their_hosts(tmp_path: Path) -> None:
    ns = ("ip", "netns", "exec")
    placed = place(
        _info(tmp_path),
        {
            "nimbus": DaemonHost("10.77.1.1", (*ns, "sr3abcd-h1")),
            "supervisor-2": DaemonHost("10.77.1.3", (*ns, "sr3abcd-h3")),
        },
    )
    assert placed.nimbus == "10.77.1.1:6627"
    assert placed.nimbus_launch_prefix == (*ns, "sr3abcd-h1")
    first, second = placed.supervisors
    assert (first.host, first.launch_prefix) == ("127.0.0.1", ())  # not named
    assert (second.host, second.launch_prefix) == ("10.77.1.3", (*ns, "sr3abcd-h3"))
    conf = cluster_conf(
        placed, root=tmp_path, log_dir=tmp_path, worker_heap_mb=256, extra={}
    )
    assert conf["nimbus.seeds"] == ["10.77.1.1"]
    assert conf["storm.local.hostname"] == "10.77.1.1"
    assert conf["storm.zookeeper.servers"] == ["10.77.1.1"]
    # cluster.json keeps the placement, so `attach` restarts daemons where they ran
    again = StormClusterInfo.from_json(json.loads(json.dumps(placed.to_json())))
    assert again == placed


def test_an_unplaced_cluster_stays_on_loopback(tmp_path: Path) -> None:
    info = place(_info(tmp_path), {})
    assert info.nimbus == "127.0.0.1:6627"
    conf = cluster_conf(info, root=tmp_path, log_dir=tmp_path, worker_heap_mb=256,
                        extra={})  # fmt: skip
    assert conf["nimbus.seeds"] == ["127.0.0.1"]
    new_keys = ("nimbus_host", "nimbus_launch_prefix")
    old = {k: v for k, v in info.to_json().items() if k not in new_keys}
    old["supervisors"] = [
        {k: v for k, v in s.items() if k not in ("host", "launch_prefix")}
        for s in old["supervisors"]
    ]
    old["nimbus_pid"] = None
    assert StormClusterInfo.from_json(old) == info  # a cluster.json from before


def test_workers_start_with_the_labs_jvm_flags_unless_the_conf_replaces_them(
    tmp_path: Path,
) -> None:
    info = place(_info(tmp_path), {})
    conf = cluster_conf(info, root=tmp_path, log_dir=tmp_path, worker_heap_mb=384,
                        extra={})  # fmt: skip
    opts = str(conf["worker.childopts"]).split()
    assert "-Xmx384m" in opts
    assert all(flag in opts for flag in LAB_JVM_FLAGS)
    assert all(flag in str(conf["topology.worker.logwriter.childopts"]).split()
               for flag in LAB_JVM_FLAGS)  # fmt: skip
    mine = "-Xmx1g -XX:+UseG1GC"
    conf = cluster_conf(info, root=tmp_path, log_dir=tmp_path, worker_heap_mb=384,
                        extra={"worker.childopts": mine})  # fmt: skip
    assert conf["worker.childopts"] == mine
