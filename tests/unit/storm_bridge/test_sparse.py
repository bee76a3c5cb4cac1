"""The sparse-project pieces for real Storm that need no JVM: jar, workers' logs."""

from __future__ import annotations

import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from storm_bridge.sparse.package import build_jar, resource_files
from storm_bridge.sparse.stats import counters_of, errors_of
from storm_bridge.sparse.workers import logged_lines
from topology_api.errors import TopologyError
from topology_api.topology import load_topology

REPO = Path(__file__).resolve().parents[3]


def test_jar_holds_the_file_its_modules_and_packages_under_resources(
    tmp_path: Path,
) -> None:
    topo = tmp_path / "topos"
    (topo / "helpers").mkdir(parents=True)
    (topo / "__pycache__").mkdir()
    (topo / "job.py").write_text("X = 1\n")
    (topo / "util.py").write_text("Y = 2\n")
    (topo / "helpers" / "__init__.py").write_text("")
    (topo / "helpers" / "deep.py").write_text("Z = 3\n")
    (topo / "__pycache__" / "job.cpython-311.pyc").write_bytes(b"\0")
    jar = build_jar(topo / "job.py", tmp_path / "out" / "job.jar")
    with zipfile.ZipFile(jar) as archive:
        names = set(archive.namelist())
    assert {
        "META-INF/MANIFEST.MF",
        "resources/job.py",
        "resources/util.py",
        "resources/helpers/__init__.py",
        "resources/helpers/deep.py",
    } <= names
    assert not any("__pycache__" in n for n in names)


def test_project_src_joins_the_resources(tmp_path: Path) -> None:
    (tmp_path / "topologies").mkdir()
    (tmp_path / "src" / "bolts").mkdir(parents=True)
    (tmp_path / "topologies" / "wc.py").write_text("")
    (tmp_path / "src" / "bolts" / "__init__.py").write_text("")
    (tmp_path / "src" / "bolts" / "count.py").write_text("")
    files = resource_files(tmp_path / "topologies" / "wc.py")
    assert set(files) == {"wc.py", "bolts/__init__.py", "bolts/count.py"}


def test_missing_topology_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="does not exist"):
        build_jar(tmp_path / "nope.py", tmp_path / "x.jar")


def test_reserved_stream_ids_are_refused_as_nimbus_does(tmp_path: Path) -> None:
    source = (
        "from streamparse import Bolt, Grouping, Spout, Stream, Topology\n"
        "class S(Spout):\n"
        "    outputs = [Stream(fields=['x'], name='__mine')]\n"
        "class B(Bolt):\n"
        "    outputs = ['y']\n"
        "class T(Topology):\n"
        "    s = S.spec()\n"
        "    b = B.spec(inputs={s['__mine']: Grouping.SHUFFLE})\n"
    )
    (tmp_path / "reserved_streams.py").write_text(source)
    with pytest.raises(TopologyError, match="stream id '__mine'.*reserved"):
        load_topology(tmp_path / "reserved_streams.py")


def test_task_log_lines_with_a_mark_are_found(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(
        "19:39:52.893 WARN  o.a.s.t.ShellBolt [Thread-30] ShellLog pid:22790, "
        "name:count 2026 - sr3.replication - node node-3 rejected the HMAC answer: "
        "give clients and nodes the same sr3.node.secret\n"
        "19:39:52.894 INFO  o.a.s.t.ShellBolt [Thread-24] ShellLog pid:22789, "
        "name:split all good\n"
    )
    found = logged_lines([log, tmp_path / "missing.log"], ["sr3.node.secret"])
    assert len(found) == 1
    assert found[0].startswith("count: ")
    assert "same sr3.node.secret" in found[0]


def test_storm_counters_leave_out_system_streams() -> None:
    wordcount = load_topology(REPO / "topologies" / "wordcount.py")

    def executor(component: str, *, bolt: bool, emitted: int, acked: int) -> object:
        streams = {"default": emitted, "__ack_ack": 99}
        inner = SimpleNamespace(
            acked={":all-time": {"default": acked}}, failed={":all-time": {}}
        )
        specific = SimpleNamespace(
            bolt=inner if bolt else None, spout=None if bolt else inner
        )
        stats = SimpleNamespace(emitted={":all-time": streams}, specific=specific)
        return SimpleNamespace(component_id=component, stats=stats)

    info = SimpleNamespace(
        executors=[
            executor("lines", bolt=False, emitted=10, acked=10),
            executor("split", bolt=True, emitted=80, acked=10),
            executor("__acker", bolt=True, emitted=5, acked=5),
        ],
        errors={"count": [SimpleNamespace(error="java.lang.X\nNo module named 'm'",
                                          error_time_secs=5)]},
    )  # fmt: skip
    counters = counters_of(info, wordcount)
    assert counters["lines"]["spout_emitted"] == 10
    assert counters["split"]["bolt_acked"] == 10
    assert counters["split"]["emitted"] == 80
    assert counters["count"]["errors"] == 1
    assert "__acker" not in counters
    assert errors_of(info, ["No module named"]) == ["count: No module named 'm'"]
    assert errors_of(info) == ["count: java.lang.X"]
