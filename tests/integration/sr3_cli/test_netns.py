"""Link shaping on real namespaces: delay and loss without the netem qdisc.

Two hosts on a bridge, built with :mod:`sr3_cli.netns` as the lab builds them,
shaped with :func:`sr3_cli.netns.shape_link`: netfilter drops and the
:mod:`sr3_cli.netdelay` process holds what arrives. Delay is checked as a lower
bound (a connection's handshake cannot take less than the delay on its path),
never as a speed.

Needs root (CAP_NET_ADMIN), iproute2 and iptables (``scripts/bootstrap.sh``
installs it): without them the cases fail naming what is missing.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sr3_cli import netns
from sr3_cli.netns import LinkShape

pytestmark = [pytest.mark.netns]

PREFIX = f"sr3n{os.getpid() % 10000:04d}"
NETWORK = ipaddress.IPv4Network("10.231.7.0/24")
ADDRESSES = {"h1": "10.231.7.1", "h2": "10.231.7.2"}
PORT = 7411

LISTEN = f"""
import socket, sys
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", {PORT})); tcp.listen(64)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", {PORT}))
print("up", flush=True)
if sys.argv[1] == "udp":
    udp.settimeout(3.0); got = 0
    try:
        while True:
            udp.recv(64); got += 1
    except TimeoutError:
        print(got, flush=True)
else:
    while True:
        tcp.accept()[0].close()
"""
CONNECT = """
import socket, sys, time
best = None
for _ in range(5):
    start = time.monotonic()
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
    except ConnectionRefusedError:
        pass
    took = (time.monotonic() - start) * 1000
    best = took if best is None else min(best, took)
print(best)
"""


def ns(host: str) -> str:
    return f"{PREFIX}-{host}"


def delay_processes(host: str) -> list[int]:
    """The pids of the delay processes holding ``host``'s packets."""
    return netns.delay_pids(ns(host))


@pytest.fixture
def hosts() -> Iterator[None]:
    """h1 and h2 on a bridge whose root-namespace address is .254."""
    missing = netns.available()
    assert missing is None, f"the netns cases need {missing}"
    netns.cleanup(PREFIX, signal.SIGKILL, NETWORK)
    bridge = PREFIX + "br"
    netns.create_bridge(bridge, "10.231.7.254", 24)
    try:
        for host, address in ADDRESSES.items():
            netns.add_host(ns(host), PREFIX + host, bridge, address, 24)
        yield
    finally:
        netns.cleanup(PREFIX, signal.SIGKILL, NETWORK)
    assert netns.namespaces(PREFIX) == []
    assert delay_processes("h1") == delay_processes("h2") == []


def shape(host: str, text: str) -> None:
    netns.shape_link(LinkShape.parse(text), veth=PREFIX + host, ns=ns(host))


def listen(host: str, mode: str = "tcp") -> subprocess.Popen[str]:
    cmd = [*netns.exec_prefix(ns(host)), sys.executable, "-c", LISTEN, mode]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "up"
    return proc


def connect_ms(to: str, *, source: str | None = None) -> float:
    """The fastest of five TCP handshakes with ``to`` (a refusal counts)."""
    cmd = [sys.executable, "-c", CONNECT, ADDRESSES[to], str(PORT)]
    if source is not None:
        cmd = [*netns.exec_prefix(ns(source)), *cmd]
    ran = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    return float(ran.stdout)


def test_a_delay_holds_what_arrives_for_both_links_on_its_path(hosts: None) -> None:
    for host in ADDRESSES:
        shape(host, "delay=15ms")
    server = listen("h2")
    try:
        # h1 to h2: the SYN waits 30 ms at h2, the SYN-ACK 30 ms at h1.
        assert connect_ms("h2", source="h1") >= 60.0
        # The CLI's root namespace: its SYN waits at h2; what it gets, nowhere.
        assert connect_ms("h2") >= 30.0
    finally:
        server.kill()
    netns.unshape_link(veth=PREFIX + "h2", ns=ns("h2"))
    assert delay_processes("h2") == []
    assert len(delay_processes("h1")) == 1
    rules = netns.run_in(ns("h2"), ["iptables", "-t", "mangle", "-S", "PREROUTING"])
    assert "NFQUEUE" not in rules.stdout


def test_a_host_whose_processes_are_killed_keeps_its_links_delay(hosts: None) -> None:
    shape("h2", "delay=15ms")
    server = listen("h2")
    netns.kill_all(ns("h2"), signal.SIGKILL)  # as `sr3 lab fail h2`
    server.wait(timeout=10)
    assert len(delay_processes("h2")) == 1
    assert connect_ms("h2") >= 30.0  # refused, after the SYN's wait


def test_a_killed_delay_process_lets_packets_through_not_drops_them(
    hosts: None,
) -> None:
    shape("h2", "delay=15ms")
    (pid,) = delay_processes("h2")
    os.kill(pid, signal.SIGKILL)
    server = listen("h2")
    try:
        connect_ms("h2")  # raises (check=True) if the handshake never completes
    finally:
        server.kill()


def test_loss_drops_some_of_what_arrives_and_not_all(hosts: None) -> None:
    shape("h2", "loss=50%")  # 75 % on arrival: lost on either link
    server = listen("h2", "udp")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for _ in range(80):
            udp.sendto(b"x", (ADDRESSES["h2"], PORT))
    out, _ = server.communicate(timeout=30)
    got = int(out.split()[-1])
    assert 0 < got < 80  # P(none) = 0.75**80, P(all) = 0.25**80
