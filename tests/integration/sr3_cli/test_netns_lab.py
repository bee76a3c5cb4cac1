"""The network-namespace lab: the ring across separate hosts, cut and killed.

One lab for the module (``sr3 lab up --netns``): ZooKeeper on h1 and ring nodes
node-1..node-5 on h2..h6, each host a namespace with its own address, links
shaped to 100 Mbit/s. Every case drives the installed ``sr3`` command in
subprocesses, as a user would, and heals what it cut before it ends; the
fixture's teardown runs ``sr3 lab down`` and checks no namespace, link or
route of the lab is left, after a failure too.

Needs root (CAP_NET_ADMIN) and iproute2: without them the fixture fails with
the message ``sr3 lab up --netns`` prints, never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sr3_cli import lab_netns, netns
from sr3_cli.chaos import Schedule, generate
from sr3_cli.cluster import open_cluster
from sr3_cli.lab import Lab
from sr3_cli.lab_netns import prefix_for
from sr3_cli.netns import LinkShape
from topology_api.topology import load_topology

pytestmark = [pytest.mark.zk, pytest.mark.netns, pytest.mark.slow]

WaitUntil = Callable[..., Any]
#: How long a node stays cut off in the partition case (the issue's figure).
PARTITION_S = 10.0
WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"


def _without_spark_source_shutdown(stderr: str) -> str:
    """Drop the traceback PySpark's Python streaming source runner can print
    when its query stops (seen once in CI, the run exact and exiting 0)."""
    lines = stderr.splitlines()
    return "\n".join(
        line
        for i, line in enumerate(lines)
        if not (
            line.startswith("Traceback")
            and i + 1 < len(lines)
            and "python_streaming_source_runner.py" in lines[i + 1]
        )
    )


def sr3(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` from the root namespace; check it printed no traceback."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        check=False,
    )
    assert "Traceback" not in _without_spark_source_shutdown(proc.stderr), proc.stderr
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def leftovers(root: Path) -> list[str]:
    """The lab's namespaces and links still present (named by its prefix)."""
    prefix = prefix_for(root)
    links = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = [ln.split(":")[1].strip() for ln in links.splitlines() if prefix in ln]
    return netns.namespaces(prefix) + found


@pytest.fixture(scope="module")
def netlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A 6-host lab: ZooKeeper on h1, node-1..node-5 on h2..h6, 100 Mbit/s links."""
    root = tmp_path_factory.mktemp("netlab") / "lab"
    try:
        up = sr3(
            "lab", "up", "--netns", "--hosts", "6", "--nodes", "5",
            "--netem", "rate=100mbit", "--dir", str(root), check=False,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr
        yield Lab.load(root)
    finally:
        sr3("lab", "down", "--dir", str(root), check=False)
        assert leftovers(root) == []


@pytest.fixture
def healed(netlab: Lab) -> Iterator[Lab]:
    """The lab; every partition healed and every node running after the case."""
    yield netlab
    sr3("lab", "heal", "--dir", str(netlab.root))
    sr3("lab", "restart", *sorted(netlab.nodes), "--dir", str(netlab.root))


def status(lab: Lab) -> dict[str, Any]:
    return status_at(lab.root)


def put(lab: Lab, owner: str, size: str = "256KB") -> subprocess.CompletedProcess[str]:
    return sr3(
        "snapshot", "put", "--lab", str(lab.root), "--owner", owner, "--size", size,
        check=False,
    )  # fmt: skip


def verify(lab: Lab, owner: str) -> None:
    got = sr3("snapshot", "get", "--lab", str(lab.root), "--owner", owner, "--verify")
    assert got.returncode == 0, got.stderr


def holders(lab: Lab, owner: str) -> set[str]:
    with open_cluster(lab.config(), create=False) as cluster:
        shards = cluster.manifests.shards(owner).values()
        return {h for meta in shards for h in meta.holders}


def test_status_shows_each_host_its_address_and_what_runs_there(netlab: Lab) -> None:
    hosts = {h["host"]: h for h in status(netlab)["hosts"]}
    assert sorted(hosts) == [f"h{i}" for i in range(1, 7)]
    assert hosts["h1"]["roles"] == ["zookeeper"]
    assert [hosts[f"h{i}"]["roles"] for i in range(2, 7)] == [
        [f"node-{i}"] for i in range(1, 6)
    ]
    result = status(netlab)
    nodes = {n["id"]: n["address"] for n in result["nodes"]}
    for i in range(1, 6):  # each node announces its host's address
        assert nodes[f"node-{i}"].split(":")[0] == hosts[f"h{i + 1}"]["address"]
    assert netlab.zk_hosts.split(":")[0] == hosts["h1"]["address"]
    # and serves its metrics there, where a scraper outside the host reaches them
    node_hosts = {h["address"] for h in hosts.values() if h["host"] != "h1"}
    scraped = [e for e in result["metrics"] if e["job"] == "sr3-nodes"]
    assert {e["instance"].split(":")[0] for e in scraped} == node_hosts
    for endpoint in scraped:
        with urllib.request.urlopen(endpoint["url"], timeout=10) as reply:  # noqa: S310 (http on the bridge)
            assert b"sr3_node_shards" in reply.read()


def test_every_ring_node_runs_as_the_vagrant_provisioning_script_starts_it(
    netlab: Lab,
) -> None:
    # the netns lab is where vagrant/provision/node.sh runs for real: each node
    # is exec'd by the wrapper the script wrote, as systemd runs it on a VM
    for node_id, node in sorted(netlab.nodes.items()):
        wrapper = netlab.root / "nodes" / "provision" / node_id / "etc" / "run" / "node"
        text = wrapper.read_text(encoding="utf-8")
        assert "written by vagrant/provision" in text
        assert f"--node-id {node_id}" in text
        assert node.pid is not None
        environ = Path(f"/proc/{node.pid}/environ").read_bytes().split(b"\0")
        # only the wrapper exports the ring secret into the node's environment
        assert any(v.startswith(b"SR3_NODE_SECRET=") for v in environ), node_id
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
        assert b"node" in cmdline
        assert node.data_dir.encode() in cmdline


def test_a_node_partitioned_for_10_s_loses_nothing(
    healed: Lab, wait_until: WaitUntil
) -> None:
    lab = healed
    assert put(lab, "before-cut").returncode == 0
    sr3("lab", "partition", "h2", "--dir", str(lab.root))
    written = []
    ends = time.monotonic() + PARTITION_S
    while time.monotonic() < ends or len(written) < 3:
        owner = f"during-cut-{len(written)}"
        done = put(lab, owner)
        assert done.returncode == 0, done.stderr  # the other four take them
        written.append(owner)
    sr3("lab", "heal", "--dir", str(lab.root))
    wait_until(lambda: status(lab)["live_nodes"] == 5, timeout_s=60, what="node-1 back")
    for owner in ["before-cut", *written]:
        verify(lab, owner)
    result = status(lab)
    assert result["lost"] == 0


def test_a_write_that_cannot_reach_the_write_quorum_is_refused(healed: Lab) -> None:
    lab = healed
    # the writer (the root namespace) reaches node-1 only; every node keeps its
    # ZooKeeper session, so the ring still lists five live nodes
    for host in ("h3", "h4", "h5", "h6"):
        sr3("lab", "partition", host, "--from", "root", "--dir", str(lab.root))
    assert status(lab)["live_nodes"] == 5
    refused = put(lab, "below-quorum")
    assert refused.returncode != 0
    assert "write quorum is 2" in refused.stderr
    sr3("lab", "heal", "--dir", str(lab.root))
    # refused, not acknowledged: no epoch of it was published
    got = sr3(
        "snapshot", "get", "--lab", str(lab.root), "--owner", "below-quorum",
        check=False,
    )  # fmt: skip
    assert got.returncode != 0
    assert holders(lab, "below-quorum") == set()


def test_repair_completes_after_heal(healed: Lab, wait_until: WaitUntil) -> None:
    lab = healed
    sr3("lab", "partition", "h2", "--dir", str(lab.root))
    wait_until(
        lambda: status(lab)["live_nodes"] == 4,
        timeout_s=60,
        what="node-1's session to end",
    )
    owners = [f"while-away-{i}" for i in range(8)]
    for owner in owners:
        assert put(lab, owner, "64KB").returncode == 0
    assert not any("node-1" in holders(lab, owner) for owner in owners)
    sr3("lab", "heal", "--dir", str(lab.root))

    def repaired() -> bool:
        result = status(lab)
        back = any("node-1" in holders(lab, owner) for owner in owners)
        return result["live_nodes"] == 5 and result["under_replicated"] == 0 and back

    # shards whose preference list takes node-1 again are copied to it
    wait_until(repaired, timeout_s=120, what="repair onto node-1 after heal")
    for owner in owners:
        assert len(holders(lab, owner)) >= 3
        verify(lab, owner)


def test_two_hosts_killed_at_once_are_recovered_from(
    healed: Lab, wait_until: WaitUntil
) -> None:
    lab = healed
    owners = [f"before-kill-{i}" for i in range(6)]
    for owner in owners:
        assert put(lab, owner, "64KB").returncode == 0
    failed = sr3("lab", "fail", "h3", "h4", "--dir", str(lab.root))
    assert "h3: killed 1 processes" in failed.stdout
    assert "h4: killed 1 processes" in failed.stdout
    wait_until(
        lambda: status(lab)["live_nodes"] == 3, timeout_s=60, what="two nodes gone"
    )
    for owner in owners:  # r=3: a third replica survives on another host
        verify(lab, owner)
    wait_until(
        lambda: status(lab)["under_replicated"] == 0,
        timeout_s=120,
        what="repair onto the three survivors",
    )
    for owner in owners:
        alive = holders(lab, owner) - {"node-2", "node-3"}
        assert len(alive) == 3
    sr3("lab", "restart", "node-2", "node-3", "--dir", str(lab.root))
    wait_until(lambda: status(lab)["live_nodes"] == 5, timeout_s=60, what="rejoin")
    for owner in owners:
        verify(lab, owner)


@pytest.fixture
def nobodys_dir() -> Iterator[Path]:
    """A dir user nobody can write (pytest's tmp dirs are root's alone)."""
    home = Path(tempfile.mkdtemp(prefix="sr3-nobody-"))
    home.chmod(0o755)
    os.chown(home, 65534, 65534)
    yield home
    shutil.rmtree(home)


def test_without_root_netns_is_refused_and_the_loopback_lab_works(
    nobodys_dir: Path,
) -> None:
    root = nobodys_dir / "lab"

    def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
        unprivileged = ("setpriv", "--reuid", "65534", "--regid", "65534")
        proc = subprocess.run(
            [*unprivileged, "--clear-groups", sys.executable, "-m", "sr3_cli", *args],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("SR3_")},
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    try:
        refused = as_nobody("lab", "up", "--netns", "--dir", str(root))
        assert refused.returncode == 2
        assert "the network-namespace lab needs root (CAP_NET_ADMIN)" in (
            refused.stderr
        )
        assert "or drop --netns: the loopback lab needs neither" in refused.stderr
        assert leftovers(root) == []
        # the same lab dir then runs the loopback lab (as root here: this
        # machine's python lives under /root, which nobody cannot traverse)
        up = sr3("lab", "up", "--nodes", "1", "--dir", str(root))
        assert "ZooKeeper 127.0.0.1:" in up.stdout
        assert status_at(root)["live_nodes"] == 1
        assert status_at(root)["hosts"] is None
        moved = sr3("lab", "up", "--netns", "--dir", str(root), check=False)
        assert moved.returncode == 2
        assert "runs on loopback; `sr3 lab down --dir" in moved.stderr
        assert leftovers(root) == []
    finally:
        sr3("lab", "down", "--dir", str(root))


def status_at(root: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        sr3("status", "--json", "--lab", str(root)).stdout
    )
    return result


def test_lab_down_removes_the_hosts_of_a_lab_whose_dir_is_gone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "crashed"
    try:
        sr3("lab", "up", "--netns", "--hosts", "2", "--nodes", "1", "--dir", str(root))
        assert len(leftovers(root)) == 2 + 2 + 1  # namespaces, veth ends, bridge
        shutil.rmtree(root)  # as a crash that took lab.json with it
        down = sr3("lab", "down", "--dir", str(root))
        assert "no readable lab.json" in down.stdout
        assert leftovers(root) == []
    finally:
        root.mkdir(exist_ok=True)
        sr3("lab", "down", "--dir", str(root), check=False)
        assert leftovers(root) == []


def qdisc_of(lab: Lab, host: str) -> str:
    """What shapes ``host``'s link on the bridge side."""
    veth = prefix_for(lab.root) + host
    return subprocess.run(
        ["tc", "qdisc", "show", "dev", veth], capture_output=True, text=True, check=True
    ).stdout


def test_compare_runs_under_netem_on_the_netns_ring_and_restores_the_shape(
    healed: Lab, tmp_path: Path
) -> None:
    lab = healed
    out = tmp_path / "report"
    compared = sr3(
        "compare", str(WORDCOUNT), "--engines", "storm,spark", "--lab", str(lab.root),
        "--netem", "rate=20mbit,delay=2ms", "-o", "wordcount.lines=200",
        "--max-rows-per-batch", "200", "--out", str(out), check=False,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["agree"] is True
    assert results["network"]["shape"] == "rate=20mbit,delay=2ms"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "every host's link shaped `rate=20mbit,delay=2ms`" in report
    assert lab.netns is not None
    assert results["network"]["hosts"] == lab.netns["hosts"]
    for host in lab.netns["hosts"]:
        assert "rate 100Mbit" in qdisc_of(lab, host)  # the lab's own shape again
    assert netns.delay_pids(prefix_for(lab.root)) == []  # the lab has no delay


def test_reshaping_applies_to_every_host_and_restores_the_labs_shape(
    netlab: Lab,
) -> None:
    with lab_netns.reshaped(netlab, LinkShape.parse("rate=20mbit")) as network:
        assert network["shape"] == "rate=20mbit"
        for host in network["hosts"]:
            assert "rate 20Mbit" in qdisc_of(netlab, host)
    for host in network["hosts"]:
        assert "rate 100Mbit" in qdisc_of(netlab, host)


def _netns_schedule(lab: Lab) -> tuple[int, int, Schedule]:
    """The first seed's schedule that cuts a node off and slows every link."""
    topology = load_topology(WORDCOUNT)
    for seed in range(1, 200):
        for schedule in generate(
            seed, 5, topology=topology, nodes=sorted(lab.nodes), netns=True
        ):
            kinds = {f.kind for f in schedule.faults}
            if {"partition-node", "netem-slow"} <= kinds:
                return seed, schedule.index, schedule
    pytest.fail("no schedule with both netns faults in 200 seeds")


def test_a_chaos_schedule_with_a_cut_off_node_and_slow_links_passes(
    healed: Lab,
) -> None:
    lab = healed
    seed, index, schedule = _netns_schedule(lab)
    ran = sr3(
        "chaos", "--topology", str(WORDCOUNT), "--lab", str(lab.root),
        "--netns-faults", "--seed", str(seed), "--schedules", str(index + 1),
        "--only", str(index), "--json", check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    (run,) = result["runs"]
    assert run["passed"] is True
    assert run["faults"] == [f.describe() for f in schedule.faults]
    assert "--netns-faults" in run["replay"]
    for host in lab.netns["hosts"] if lab.netns else ():
        assert "rate 100Mbit" in qdisc_of(lab, host)  # links restored
    assert status(lab)["live_nodes"] == 5  # the cut-off node is back


def test_a_lab_with_delayed_lossy_links_serves_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "delayed"
    shape = "rate=100mbit,delay=5ms,loss=0.5%"
    try:
        sr3(
            "lab", "up", "--netns", "--hosts", "2", "--nodes", "1",
            "--netem", shape, "--dir", str(root),
        )  # fmt: skip
        lab = Lab.load(root)
        assert status_at(root)["live_nodes"] == 1
        # One delay process per host, in the root namespace.
        assert len(netns.delay_pids(prefix_for(root))) == 2
        assert put(lab, "delayed-owner", "1MB").returncode == 0
        verify(lab, "delayed-owner")
        # A delay process that died shows in status; `lab up` again restarts it.
        os.kill(netns.delay_pids(f"{prefix_for(root)}-h2")[0], signal.SIGKILL)
        hosts = {h["host"]: h["delay_held"] for h in status_at(root)["hosts"]}
        assert hosts == {"h1": True, "h2": False}
        text = sr3("status", "--lab", str(root)).stdout
        assert "links of h2 NOT DELAYED" in text
        sr3(
            "lab", "up", "--netns", "--hosts", "2", "--nodes", "1",
            "--netem", shape, "--dir", str(root),
        )  # fmt: skip
        hosts = {h["host"]: h["delay_held"] for h in status_at(root)["hosts"]}
        assert hosts == {"h1": True, "h2": True}
    finally:
        sr3("lab", "down", "--dir", str(root), check=False)
    assert leftovers(root) == []
    assert netns.delay_pids(prefix_for(root)) == []
