"""Network namespaces on one machine: hosts on a bridge, link shaping, partitions.

The one place that runs ``ip`` and ``tc`` for the lab (:mod:`sr3_cli.lab_netns`)
and the shaped-link benchmark (``bench/recovery_netns.py``). Every name it
creates starts with a prefix of the caller's choosing, so :func:`cleanup`
removes what a crashed run left behind by name alone.

A host is a namespace ``<prefix>-<host>`` whose ``eth0`` is one end of a veth
pair; the other end, ``<prefix><host>``, is a port of the bridge
``<prefix>br``. The bridge holds the subnet's ``.254`` address, so commands in
the root namespace (the ``sr3`` CLI, tests) reach every host. Namespaces get no
default route: nothing leaves the bridge and loopback.

Shaping (:class:`LinkShape`) models each host on its own link: a rate, a
one-way delay and a loss rate per direction, so two hosts see the sum of their
links. Rate is ``tbf`` on both ends of the host's veth pair. Delay and loss do
not use the ``netem`` qdisc, which many kernels (this project's CI machines
among them) are built without: netfilter does them, in the host's namespace,
on what arrives on ``eth0``. An ``iptables`` rule drops packets at random
(``statistic``) and another hands the rest to queue 0, where
:mod:`sr3_cli.netdelay` holds each one for the delay. Both links' delay and
loss on a packet's path are applied where it arrives, not half on the way
out, because a packet held on its sender's way out still counts against the
sending socket's TCP small-queue budget and stalls the connection at a few
Mbit/s. So host to host and round trips are as two netem links would make
them; the CLI's root namespace sends through its hosts' delay and receives
without any.

A partition (:func:`block`) is a ``blackhole`` route to the peer's address in
each side's namespace: the two hosts' packets to each other are dropped by the
routing table (senders see ``EINVAL``, as a host whose route is gone), with no
netfilter needed. :func:`unblock_all` removes them.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from sr3.errors import ConfigError, SR3Error
from sr3_cli import netdelay, processes

__all__ = [
    "E_NEEDS_ROOT",
    "E_NO_IPTABLES",
    "LinkShape",
    "NetnsError",
    "add_host",
    "available",
    "block",
    "block_from_root",
    "cleanup",
    "create_bridge",
    "delay_pids",
    "delaying",
    "exec_prefix",
    "kill_all",
    "namespaces",
    "pids",
    "require",
    "run_in",
    "shape_link",
    "unblock_all",
    "unblock_root",
    "unshape_link",
]

E_NEEDS_ROOT = (
    "the network-namespace lab needs root (CAP_NET_ADMIN) and iproute2's `ip` and "
    "`tc` ({missing}); run it as root (`sudo sr3 lab up --netns ...`) after "
    "`apt-get install iproute2`, or drop --netns: the loopback lab needs neither"
)
E_NO_IPTABLES = (
    "{spec}: delay and loss are applied with netfilter (iptables' NFQUEUE and "
    "statistic match), and `iptables` is not installed; `apt-get install iptables` "
    "(scripts/bootstrap.sh does), or shape by rate only (`--netem rate=100mbit`)"
)
E_SHAPE = (
    "bad --netem {text!r}: {why}; give comma-separated rate=RATE (as 100mbit, "
    "1gbit, 500kbit), delay=DURATION (as 20ms) and loss=PERCENT (as 0.5%)"
)
_RATE_RE: Final = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
_DELAY_RE: Final = re.compile(r"^(\d+(\.\d+)?)ms$")
_LOSS_RE: Final = re.compile(r"^(\d+(\.\d+)?)%$")
#: How long :func:`shape_link` waits for a delay process to bind its queue.
_DELAY_READY_S: Final = 10.0
#: How long a delay process gets to let its held packets go before SIGKILL.
_DELAY_STOP_S: Final = 3.0
#: The longest interface name Linux takes (IFNAMSIZ - 1).
_IFNAME_MAX: Final = 15


class NetnsError(SR3Error):
    """An ``ip``/``tc`` command failed; the message quotes it and its output."""


@dataclass(frozen=True)
class LinkShape:
    """How a host's link is shaped; all None means unshaped.

    Attributes:
        rate: Bandwidth in tc's units (``100mbit``), each direction.
        delay_ms: One-way delay added to each direction (so RTT adds 2x).
        loss_pct: Packets dropped at random, each direction, in percent.
    """

    rate: str | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None

    @classmethod
    def parse(cls, text: str) -> LinkShape:
        """Parse ``rate=100mbit,delay=20ms,loss=0%`` (any subset, any order).

        Raises:
            ConfigError: an unknown key, a bad value, or a key given twice.
        """
        values: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or key not in ("rate", "delay", "loss") or key in values:
                why = f"{item!r} is not one of rate=, delay=, loss= (each once)"
                raise ConfigError(E_SHAPE.format(text=text, why=why))
            values[key] = value.strip().lower()
        rate, delay, loss = values.get("rate"), values.get("delay"), values.get("loss")
        if rate is not None and not _RATE_RE.match(rate):
            why = f"rate {rate!r} is no tc rate"
            raise ConfigError(E_SHAPE.format(text=text, why=why))
        delay_m = _DELAY_RE.match(delay) if delay is not None else None
        if delay is not None and delay_m is None:
            why = f"delay {delay!r} is not milliseconds"
            raise ConfigError(E_SHAPE.format(text=text, why=why))
        loss_m = _LOSS_RE.match(loss) if loss is not None else None
        if loss is not None and (loss_m is None or float(loss_m.group(1)) > 100):
            why = f"loss {loss!r} is not a percentage"
            raise ConfigError(E_SHAPE.format(text=text, why=why))
        return cls(
            rate=rate,
            delay_ms=float(delay_m.group(1)) if delay_m else None,
            loss_pct=float(loss_m.group(1)) if loss_m else None,
        )

    @property
    def needs_netfilter(self) -> bool:
        """Whether delay or loss is asked for (tbf shapes rate only)."""
        return bool(self.delay_ms) or bool(self.loss_pct)

    def qdisc(self) -> list[str] | None:
        """The ``tc qdisc add dev DEV root ...`` arguments for the rate, or None."""
        if self.rate:
            return ["tbf", "rate", self.rate, "burst", "64kb", "latency", "200ms"]
        return None

    def arrival_delay_ms(self) -> float:
        """What a host holds each arriving packet: both links' one-way delay."""
        return 2 * (self.delay_ms or 0.0)

    def arrival_loss(self) -> float:
        """The chance a host drops an arriving packet: lost on either link."""
        kept = 1.0 - (self.loss_pct or 0.0) / 100.0
        return 1.0 - kept * kept

    def netfilter_rules(self, dev: str) -> list[list[str]]:
        """The ``iptables`` commands shaping what arrives on ``dev`` (in order)."""
        rules: list[list[str]] = []
        base = ["iptables", "-w", "-t", "mangle", "-A", "PREROUTING", "-i", dev]
        if self.loss_pct:
            chance = f"{self.arrival_loss():.6f}"
            statistic = ["-m", "statistic", "--mode", "random", "--probability", chance]
            rules.append([*base, *statistic, "-j", "DROP"])
        if self.delay_ms:
            queue = ["--queue-num", str(netdelay.QUEUE), "--queue-bypass"]
            rules.append([*base, "-j", "NFQUEUE", *queue])
        return rules

    def __str__(self) -> str:
        parts = [f"rate={self.rate}"] if self.rate else []
        if self.delay_ms:
            parts.append(f"delay={self.delay_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss={self.loss_pct:g}%")
        return ",".join(parts) or "unshaped"


def available() -> str | None:
    """Return what is missing for namespaces (root, ip, tc), or None."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.insert(0, "not running as root")
    return ", ".join(missing) or None


def require() -> None:
    """Refuse to go on without root and iproute2.

    Raises:
        ConfigError: what is missing, and how to get it.
    """
    missing = available()
    if missing is not None:
        raise ConfigError(E_NEEDS_ROOT.format(missing=missing))


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        msg = f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}"
        raise NetnsError(msg)
    return proc


def exec_prefix(ns: str) -> list[str]:
    """Return the command prefix running a program inside namespace ``ns``.

    ``ip netns exec`` execs the program, so the pid a caller gets is its pid.
    """
    return ["ip", "netns", "exec", ns]


def _ifname(name: str) -> str:
    if len(name) > _IFNAME_MAX:
        msg = f"interface name {name!r} is longer than {_IFNAME_MAX} characters"
        raise ConfigError(msg)
    return name


def create_bridge(bridge: str, gateway: str, prefix_len: int) -> None:
    """Create ``bridge`` with ``gateway`` as the root namespace's address on it."""
    _run("ip", "link", "add", _ifname(bridge), "type", "bridge")
    _run("ip", "addr", "add", f"{gateway}/{prefix_len}", "dev", bridge)
    _run("ip", "link", "set", bridge, "up")


def add_host(ns: str, veth: str, bridge: str, address: str, prefix_len: int) -> None:
    """Create namespace ``ns`` with ``address`` on ``eth0``, plugged into ``bridge``."""
    _run("ip", "netns", "add", ns)
    peer = _ifname(veth + "p")
    _run("ip", "link", "add", _ifname(veth), "type", "veth", "peer", "name", peer)
    _run("ip", "link", "set", peer, "netns", ns)
    _run("ip", "link", "set", veth, "master", bridge, "up")
    inside = exec_prefix(ns)
    _run(*inside, "ip", "link", "set", peer, "name", "eth0")
    _run(*inside, "ip", "addr", "add", f"{address}/{prefix_len}", "dev", "eth0")
    _run(*inside, "ip", "link", "set", "eth0", "up")
    _run(*inside, "ip", "link", "set", "lo", "up")


def shape_link(shape: LinkShape, *, veth: str, ns: str, ns_dev: str = "eth0") -> None:
    """Shape a host's link as ``shape``.

    Rate goes on both ends of its veth pair (``veth`` here, ``ns_dev`` inside
    ``ns``); delay and loss on what arrives on ``ns_dev``.

    Raises:
        ConfigError: delay or loss asked for without ``iptables``.
        NetnsError: tc, iptables or the delay process refused.
    """
    if shape.needs_netfilter and shutil.which("iptables") is None:
        raise ConfigError(E_NO_IPTABLES.format(spec=shape))
    args = shape.qdisc()
    for prefix, dev in (([], veth), (exec_prefix(ns), ns_dev)):
        if args is None:
            break
        _run(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        proc = _run(
            *prefix, "tc", "qdisc", "add", "dev", dev, "root", *args, check=False
        )
        if proc.returncode != 0:
            msg = f"tc refused {' '.join(args)} on {dev}: {proc.stderr.strip()}"
            raise NetnsError(msg)
    if shape.delay_ms:
        _start_delay(ns, shape.arrival_delay_ms())
    for rule in shape.netfilter_rules(ns_dev):
        _run(*exec_prefix(ns), *rule)


def unshape_link(*, veth: str, ns: str, ns_dev: str = "eth0") -> None:
    """Remove the shaping of a host's link (nothing if unshaped)."""
    _run("tc", "qdisc", "del", "dev", veth, "root", check=False)
    _run(*exec_prefix(ns), "tc", "qdisc", "del", "dev", ns_dev, "root", check=False)
    if shutil.which("iptables") is not None:
        flush = ["iptables", "-w", "-t", "mangle", "-F", "PREROUTING"]
        _run(*exec_prefix(ns), *flush, check=False)
    _stop_delays(lambda name: name == ns)


def _delay_log(ns: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"{ns}.netdelay.log")


def _start_delay(ns: str, delay_ms: float) -> None:
    """Start the process holding ``ns``'s queued packets; return once bound."""
    _stop_delays(lambda name: name == ns)
    delay = f"{delay_ms:g}"
    cmd = [sys.executable, "-m", netdelay.MARKER, "--netns", ns, "--delay-ms", delay]
    with open(_delay_log(ns), "wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, by sys.executable
            cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True
        )
    assert proc.stdout is not None  # noqa: S101 - stdout=PIPE above
    # It prints one line, "ready", once bound; a failure exits instead.
    line = proc.stdout.readline()
    proc.stdout.close()
    if line.strip() != b"ready":
        proc.wait(timeout=_DELAY_READY_S)
        with open(_delay_log(ns), encoding="utf-8", errors="replace") as log_file:
            why = log_file.read().strip()
        msg = f"the delay process for {ns} did not start ({proc.returncode}): {why}"
        raise NetnsError(msg)


def _delay_pids(wanted: Callable[[str], bool]) -> list[int]:
    """Return the pids of delay processes whose namespace ``wanted`` accepts."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        args = processes.command_line(int(entry)) or []
        if netdelay.MARKER in args and "--netns" in args:
            at = args.index("--netns") + 1
            if at < len(args) and wanted(args[at]):
                found.append(int(entry))
    return found


def delay_pids(prefix: str) -> list[int]:
    """Return the pids of the delay processes of the namespaces ``prefix...``."""
    return _delay_pids(lambda name: name.startswith(prefix))


def delaying(ns: str) -> bool:
    """Whether a delay process holds what arrives in namespace ``ns``."""
    return bool(_delay_pids(lambda name: name == ns))


def _stop_delays(wanted: Callable[[str], bool]) -> None:
    """Stop the delay processes of the namespaces ``wanted`` accepts.

    SIGTERM first: a delay process lets what it holds go, then exits.
    """
    processes.stop_processes(_delay_pids(wanted), grace_s=_DELAY_STOP_S)


def block(ns: str, peer: str) -> None:
    """Drop what namespace ``ns`` sends to address ``peer`` (idempotent)."""
    _run(*exec_prefix(ns), "ip", "route", "replace", "blackhole", f"{peer}/32")


def unblock_all(ns: str) -> None:
    """Remove every partition route from namespace ``ns``."""
    _run(*exec_prefix(ns), "ip", "route", "flush", "type", "blackhole", check=False)


def block_from_root(peer: str) -> None:
    """Drop what the root namespace (the CLI's side) sends to ``peer``."""
    _run("ip", "route", "replace", "blackhole", f"{peer}/32")


def unblock_root(network: ipaddress.IPv4Network) -> None:
    """Remove the root namespace's partition routes into ``network``."""
    proc = _run("ip", "-o", "route", "show", "type", "blackhole", check=False)
    for line in proc.stdout.splitlines():
        words = line.split()
        target = words[1] if len(words) > 1 else ""
        try:
            found = ipaddress.IPv4Network(target, strict=False)
        except ValueError:
            continue
        inside = found.subnet_of(network)
        if inside:
            _run("ip", "route", "del", "blackhole", target, check=False)


def pids(ns: str) -> list[int]:
    """Return the pids of the processes in namespace ``ns``."""
    proc = _run("ip", "netns", "pids", ns, check=False)
    return [int(w) for w in proc.stdout.split() if w.isdigit()]


def kill_all(ns: str, sig: int) -> list[int]:
    """Send ``sig`` to every process in namespace ``ns``; return their pids."""
    found = pids(ns)
    for pid in found:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
    return found


def namespaces(prefix: str) -> list[str]:
    """Return the namespaces whose names start with ``prefix``."""
    proc = _run("ip", "netns", "list", check=False)
    names = (line.split()[0] for line in proc.stdout.splitlines() if line.strip())
    return sorted(n for n in names if n.startswith(prefix))


def _links(prefix: str) -> list[str]:
    proc = _run("ip", "-o", "link", "show", check=False)
    found = []
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            name = parts[1].strip().split("@", 1)[0]
            if name.startswith(prefix):
                found.append(name)
    return found


def cleanup(prefix: str, sig: int, network: ipaddress.IPv4Network | None) -> None:
    """Remove every namespace and link named ``prefix...`` and their processes.

    Processes still in those namespaces get ``sig`` first. Idempotent: what
    is gone already is skipped, so it also cleans after a crash.
    """
    _stop_delays(lambda name: name.startswith(prefix))
    for ns in namespaces(prefix):
        kill_all(ns, sig)
        _run("ip", "netns", "del", ns, check=False)
    for link in _links(prefix):
        _run("ip", "link", "del", link, check=False)
    if network is not None:
        unblock_root(network)


def run_in(ns: str, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` inside namespace ``ns`` and return its result (not checked)."""
    return _run(*exec_prefix(ns), *cmd, check=False)
