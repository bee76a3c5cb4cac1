"""The lab's hosts (``sr3 lab up --netns``): placement, fail, partition, heal, down.

With ``--netns --hosts N`` the lab builds N hosts ``h1``..``hN`` with
:mod:`sr3_cli.netns`, each a network namespace on one bridge with its own
address in a /24 of 10.77.0.0/16 chosen from the lab dir (so two labs on one
machine rarely meet; see docs/lab.md). lab.json's ``netns`` section records
them::

    {"prefix": "sr3ab12", "network": "10.77.18.0/24", "shape": "rate=100mbit",
     "hosts": {"h1": "10.77.18.1", "h2": "10.77.18.2", ...}}

Placement is a rule, not a record: ZooKeeper and the control daemons
(Storm's Nimbus, the Spark master, the Kafka broker: :data:`CONTROL_DAEMONS`)
run on ``h1``; ring node ``node-i``, Storm's ``supervisor-i`` and Spark's
``spark-worker-i`` on host ``h(2 + (i-1) mod (N-1))`` (on ``h1`` when N is 1),
as on the Vagrant lab's worker VMs, so a node restarted by ``sr3 lab restart``
comes back on its host. Every process there binds and announces the host's
address. Clients in the root namespace (the ``sr3`` CLI, a Spark driver)
reach the hosts through the bridge's address, ``gateway``, which is also
the address a Spark driver binds so executors connect back
(:func:`driver_address`).

All names start with the lab's prefix (``sr3`` and four hex digits of the lab
dir's path), so ``sr3 lab down`` removes the namespaces, their processes, the
bridge and partition routes of this lab by name, after a crash too, and even
without lab.json.
"""

from __future__ import annotations

import hashlib
import ipaddress
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol

from sr3.errors import ConfigError
from sr3_cli import netns
from sr3_cli.netns import LinkShape

__all__ = [
    "Placement",
    "CONTROL_DAEMONS",
    "ROOT_HOST",
    "build",
    "daemon_placements",
    "driver_address",
    "fail",
    "heal",
    "host_names",
    "node_placement",
    "partition",
    "prefix_for",
    "reshaped",
    "restore_shape",
    "shape_all",
    "shape_text",
    "teardown",
    "zk_placement",
]

#: The name `--from` gives the root namespace (the CLI's and clients' side).
ROOT_HOST: Final = "root"
#: The daemons that run on ``h1``, with ZooKeeper (the rest: on worker hosts).
CONTROL_DAEMONS: Final = ("nimbus", "spark-master", "kafka")
#: The /16 every lab's /24 is taken from.
_SUPERNET: Final = ipaddress.ip_network("10.77.0.0/16")
_BRIDGE_HOST: Final = 254
_PREFIX_LEN: Final = 24

E_NOT_NETNS = (
    "the lab in {root} has no hosts: `sr3 lab {what}` acts on the hosts of a lab "
    "started with `sr3 lab up --netns --hosts N` (stop this one with `sr3 lab down`)"
)
E_NO_HOST = "no host {host!r} in the lab at {root} (hosts: {known}, and 'root')"
E_RESHAPE = (
    "the lab in {root} already runs with {have}; `sr3 lab down` it first to "
    "build it with {want}"
)


class _NetnsLab(Protocol):
    """What this module needs of a lab (keeps :mod:`sr3_cli.lab` out of its imports)."""

    root: Path
    netns: dict[str, Any] | None


class Placement:
    """Where one process runs: its namespace (or none) and its address."""

    def __init__(self, ns: str | None, address: str) -> None:
        """Record ``ns`` (None: the root namespace) and ``address``."""
        self.ns = ns
        self.address = address

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a program there."""
        return netns.exec_prefix(self.ns) if self.ns else []


def prefix_for(root: Path) -> str:
    """Return the name prefix of the lab in ``root`` (``sr3`` + 4 hex digits)."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()
    return "sr3" + digest[:4]


def _network(prefix: str) -> ipaddress.IPv4Network:
    index = int(prefix[3:], 16) % 250 + 1
    return ipaddress.IPv4Network(f"10.77.{index}.0/{_PREFIX_LEN}")


def host_names(count: int) -> list[str]:
    """Return the names of ``count`` hosts."""
    return [f"h{i}" for i in range(1, count + 1)]


def _ns(prefix: str, host: str) -> str:
    return f"{prefix}-{host}"


def build(lab: _NetnsLab, *, hosts: int, shape: LinkShape) -> None:
    """Create the lab's hosts (kept when they exist with this count and shape).

    Raises:
        ConfigError: not root or no iproute2; the lab's hosts exist with
            another count or shape; delay or loss asked without iptables.
        NetnsError: ``ip`` or ``tc`` failed.
    """
    netns.require()
    prefix = prefix_for(lab.root)
    names = host_names(hosts)
    if lab.netns is not None and netns.namespaces(prefix + "-"):
        have = f"{len(lab.netns['hosts'])} hosts, {lab.netns['shape']}"
        want = f"{hosts} hosts, {shape}"
        if have != want:
            raise ConfigError(E_RESHAPE.format(root=lab.root, have=have, want=want))
        for host in lab.netns["hosts"]:  # a delay process that died starts again
            ns = _ns(prefix, host)
            if shape.delay_ms and not netns.delaying(ns):
                netns.unshape_link(veth=prefix + host, ns=ns)
                netns.shape_link(shape, veth=prefix + host, ns=ns)
        return
    network = _network(prefix)
    netns.cleanup(prefix, signal.SIGKILL, network)  # a crashed run's leftovers
    addresses = list(network.hosts())
    bridge = prefix + "br"
    gateway = str(addresses[_BRIDGE_HOST - 1])
    record: dict[str, Any] = {
        "prefix": prefix,
        "network": str(network),
        "gateway": gateway,
        "shape": str(shape),
        "hosts": {h: str(addresses[i]) for i, h in enumerate(names)},
    }
    lab.netns = record  # recorded first: should this command die, `lab down` cleans
    try:
        netns.create_bridge(bridge, gateway, _PREFIX_LEN)
        for host, address in record["hosts"].items():
            ns = _ns(prefix, host)
            netns.add_host(ns, prefix + host, bridge, address, _PREFIX_LEN)
            netns.shape_link(shape, veth=prefix + host, ns=ns)
    except BaseException:
        netns.cleanup(prefix, signal.SIGKILL, network)
        lab.netns = None
        raise


def _require(lab: _NetnsLab, what: str) -> dict[str, Any]:
    if lab.netns is None:
        raise ConfigError(E_NOT_NETNS.format(root=lab.root, what=what))
    return lab.netns


def _host(lab: _NetnsLab, record: dict[str, Any], host: str) -> str:
    if host not in record["hosts"]:
        known = ", ".join(record["hosts"])
        raise ConfigError(E_NO_HOST.format(host=host, root=lab.root, known=known))
    return str(record["hosts"][host])


def zk_placement(lab: _NetnsLab) -> Placement | None:
    """Return where ZooKeeper runs (``h1``), or None in a loopback lab."""
    if lab.netns is None:
        return None
    return Placement(_ns(lab.netns["prefix"], "h1"), lab.netns["hosts"]["h1"])


def node_host(record: dict[str, Any], node_id: str) -> str:
    """Return the host ``node_id`` runs on (a ring node, ``supervisor-<i>``).

    The i-th of each kind goes to the i-th host after ``h1``, round robin (to
    ``h1`` when it is the only host), so a Storm supervisor shares its host
    with a ring node, as on the Vagrant lab's worker VMs.
    """
    hosts = list(record["hosts"])
    workers = hosts[1:] or hosts
    _, _, number = node_id.rpartition("-")
    index = int(number) - 1 if number.isdigit() else sum(node_id.encode())
    return str(workers[index % len(workers)])


def node_placement(lab: _NetnsLab, node_id: str) -> Placement | None:
    """Return where ring node ``node_id`` runs, or None in a loopback lab."""
    if lab.netns is None:
        return None
    host = node_host(lab.netns, node_id)
    return Placement(_ns(lab.netns["prefix"], host), lab.netns["hosts"][host])


def daemon_host(record: dict[str, Any], name: str) -> str:
    """Return the host daemon ``name`` runs on: h1 for :data:`CONTROL_DAEMONS`."""
    return "h1" if name in CONTROL_DAEMONS else node_host(record, name)


def daemon_placements(lab: _NetnsLab, names: list[str]) -> dict[str, Placement]:
    """Return where each daemon runs (:func:`daemon_host`).

    Empty in a loopback lab.
    """
    if lab.netns is None:
        return {}
    record = lab.netns
    found = {}
    for name in names:
        host = daemon_host(record, name)
        found[name] = Placement(_ns(record["prefix"], host), record["hosts"][host])
    return found


def worker_hosts(lab: _NetnsLab) -> int:
    """Return how many worker hosts the lab has (1 in a loopback lab)."""
    if lab.netns is None:
        return 1
    return max(1, len(lab.netns["hosts"]) - 1)


def driver_address(lab: _NetnsLab, master: str | None) -> str | None:
    """Return the address a Spark driver binds to use ``master``, or None.

    Not None only for a ``spark://`` master on one of this netns lab's hosts:
    the driver runs in the root namespace, and executors on the hosts connect
    back to the bridge's address (the lab's ``gateway``).
    """
    if lab.netns is None or not master or not master.startswith("spark://"):
        return None
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    try:
        inside = ipaddress.ip_address(host) in ipaddress.ip_network(
            lab.netns["network"]
        )
    except ValueError:
        return None
    return str(lab.netns["gateway"]) if inside else None


def fail(lab: _NetnsLab, host: str) -> list[int]:
    """SIGKILL every process on ``host``; return their pids.

    Raises:
        ConfigError: the lab has no hosts, or none named ``host``.
    """
    record = _require(lab, "fail")
    _host(lab, record, host)
    return netns.kill_all(_ns(record["prefix"], host), signal.SIGKILL)


def partition(lab: _NetnsLab, host: str, others: list[str] | None = None) -> list[str]:
    """Cut ``host`` off from ``others`` (default: every other host and root).

    Both directions are dropped. Returns the names of the hosts cut off.

    Raises:
        ConfigError: the lab has no hosts, or a name is none of them.
    """
    record = _require(lab, "partition")
    address = _host(lab, record, host)
    peers = others or [h for h in record["hosts"] if h != host] + [ROOT_HOST]
    if host in peers:
        msg = f"`sr3 lab partition {host}` cannot cut {host} off from itself"
        raise ConfigError(msg)
    for peer in peers:
        if peer != ROOT_HOST:
            _host(lab, record, peer)
    for peer in peers:
        if peer == ROOT_HOST:
            netns.block(_ns(record["prefix"], host), record["gateway"])
            netns.block_from_root(address)
            continue
        netns.block(_ns(record["prefix"], host), record["hosts"][peer])
        netns.block(_ns(record["prefix"], peer), address)
    return peers


def heal(lab: _NetnsLab) -> None:
    """Remove every partition of the lab.

    Raises:
        ConfigError: the lab has no hosts.
    """
    record = _require(lab, "heal")
    for host in record["hosts"]:
        netns.unblock_all(_ns(record["prefix"], host))
    netns.unblock_root(ipaddress.IPv4Network(record["network"]))


def teardown(root: Path, record: dict[str, Any] | None) -> None:
    """Remove the lab's namespaces (their processes killed), bridge and routes.

    Works from the lab dir alone (``record`` None: lab.json lost); a no-op
    without root, where no namespace can have been made.
    """
    if netns.available() is not None:
        return
    prefix = prefix_for(root)
    network = ipaddress.IPv4Network(record["network"]) if record else _network(prefix)
    netns.cleanup(prefix, signal.SIGKILL, network)


def hosts_status(lab: _NetnsLab, names: list[str]) -> list[dict[str, Any]] | None:
    """Return each host, its address and what runs there, or None (loopback lab).

    ``names`` are the ring nodes and the daemons (``nimbus``, ``supervisor-<i>``,
    ``spark-master``, ``spark-worker-<i>``, ``kafka``).
    """
    if lab.netns is None:
        return None
    record = lab.netns
    roles: dict[str, list[str]] = {host: [] for host in record["hosts"]}
    roles["h1"].append("zookeeper")
    for name in sorted(names):
        roles[daemon_host(record, name)].append(name)
    present = set(netns.namespaces(record["prefix"] + "-"))
    delayed = LinkShape.parse(shape_text(record)).delay_ms
    return [
        {
            "host": host,
            "address": address,
            "namespace": _ns(record["prefix"], host),
            "up": _ns(record["prefix"], host) in present,
            "roles": roles[host],
            "shape": record["shape"],
            # whether its delay process runs; None: the lab's shape has no delay
            "delay_held": netns.delaying(_ns(record["prefix"], host))
            if delayed
            else None,
        }
        for host, address in record["hosts"].items()
    ]


def shape_all(lab: _NetnsLab, shape: LinkShape) -> None:
    """Shape every host's link as ``shape`` now (lab.json keeps the lab's own).

    Raises:
        ConfigError: the lab has no hosts, or delay or loss without
            iptables.
    """
    record = _require(lab, "up --netns` for a link shape")
    netns.require()
    for host in record["hosts"]:
        veth, ns = record["prefix"] + host, _ns(record["prefix"], host)
        netns.unshape_link(veth=veth, ns=ns)
        netns.shape_link(shape, veth=veth, ns=ns)


def restore_shape(lab: _NetnsLab) -> None:
    """Shape every host's link as the lab was built (``--netem`` of ``lab up``)."""
    record = _require(lab, "up --netns` for a link shape")
    shape_all(lab, LinkShape.parse(shape_text(record)))


@contextmanager
def reshaped(lab: _NetnsLab, shape: LinkShape) -> Iterator[dict[str, Any]]:
    """Shape every host's link as ``shape`` while inside; restore the lab's shape.

    Yields what results record of the network: hosts, addresses and shape.

    Raises:
        ConfigError: the lab has no hosts, or delay or loss without
            iptables.
    """
    shape_all(lab, shape)
    try:
        record = lab.netns or {}
        yield {"hosts": dict(record["hosts"]), "shape": str(shape)}
    finally:
        restore_shape(lab)


def shape_text(record: dict[str, Any]) -> str:
    """Return the ``--netem`` text of a lab's recorded shape ("" if unshaped)."""
    shape = str(record.get("shape", ""))
    return "" if shape == "unshaped" else shape
