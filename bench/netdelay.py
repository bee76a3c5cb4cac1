"""The netns lab's link shapes measured: round trip and TCP throughput per shape.

Two hosts on a bridge, built and shaped by :mod:`sr3_cli.netns` as the lab's
hosts are (rate: ``tbf``; delay and loss: netfilter and the
:mod:`sr3_cli.netdelay` process, this kernel having no ``sch_netem``). For each
shape, in one run: the round trip of 64-byte TCP messages from h1 to h2 (p50,
p99 of ``--pings``), one TCP stream's throughput h1 to h2 (``--mb``), and the
CPU the delay processes spent per MB sent. Ratios are against the unshaped
link measured in the same run. Writes bench/results/netdelay.{json,md,png}.

Needs root, iproute2 and iptables. Not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sr3_cli import netns  # noqa: E402 - after the sys.path insert
from sr3_cli.netns import LinkShape  # noqa: E402 - after the sys.path insert

RESULTS = ROOT / "bench" / "results"
#: Names start with ``sr3q``: no lab prefix (``sr3`` + hex digits) does.
PREFIX = "sr3q"
NETWORK = ipaddress.IPv4Network("10.231.9.0/24")
ADDRESSES = {"h1": "10.231.9.1", "h2": "10.231.9.2"}
PORT = 7412
SHAPES = (
    "",
    "rate=100mbit",
    "delay=10ms",
    "rate=100mbit,delay=10ms",
    "rate=100mbit,delay=10ms,loss=1%",
)

SERVER = f"""
import socket, threading
def echo(c):
    while d := c.recv(65536):
        c.sendall(d)
def sink(c):
    n = 0
    while d := c.recv(1 << 20):
        n += len(d)
    c.sendall(str(n).encode()); c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen(16); print("up", flush=True)
while True:
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kind = c.recv(1)
    threading.Thread(target=echo if kind == b"e" else sink, args=(c,)).start()
"""
CLIENT = """
import json, socket, sys, time
host, port, pings, size = sys.argv[1], *map(int, sys.argv[2:5])
c = socket.create_connection((host, port))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(b"e"); rtts = []
for _ in range(pings):
    start = time.monotonic(); c.sendall(b"x" * 64); got = 0
    while got < 64:
        got += len(c.recv(64 - got))
    rtts.append((time.monotonic() - start) * 1000)
c.close()
c = socket.create_connection((host, port)); c.sendall(b"s"); start = time.monotonic()
c.sendall(b"x" * size); c.shutdown(socket.SHUT_WR); n = int(c.recv(64))
took = time.monotonic() - start
print(json.dumps({"rtts": rtts, "bytes": n, "seconds": took}))
"""


def _ns(host: str) -> str:
    return f"{PREFIX}-{host}"


def _delay_cpu_s() -> float:
    """CPU seconds the delay processes of both hosts spent so far."""
    total = 0.0
    for pid in netns.delay_pids(PREFIX + "-"):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(shape: LinkShape, pings: int, size: int) -> dict[str, Any]:
    """Shape both hosts as ``shape``, then ping and stream from h1 to h2."""
    for host in ADDRESSES:
        netns.unshape_link(veth=PREFIX + host, ns=_ns(host))
        netns.shape_link(shape, veth=PREFIX + host, ns=_ns(host))
    server = subprocess.Popen(
        [*netns.exec_prefix(_ns("h2")), sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None  # noqa: S101 - stdout=PIPE above
        server.stdout.readline()
        cpu_before = _delay_cpu_s()
        ran = subprocess.run(
            [*netns.exec_prefix(_ns("h1")), sys.executable, "-c", CLIENT,
             ADDRESSES["h2"], str(PORT), str(pings), str(size)],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        cpu = _delay_cpu_s() - cpu_before
    finally:
        server.kill()
        server.wait()
    got = json.loads(ran.stdout)
    rtts = sorted(got["rtts"])
    mb = got["bytes"] / 1e6
    return {
        "shape": str(shape),
        "rtt_p50_ms": round(statistics.median(rtts), 2),
        "rtt_p99_ms": round(rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))], 2),
        "mbit_s": round(got["bytes"] * 8 / got["seconds"] / 1e6, 1),
        "delay_cpu_ms_per_mb": round(cpu * 1000 / mb, 2) if shape.delay_ms else None,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: each shape against what it asks and the unshaped link."""
    base = rows[0]
    lines = [
        "| shape | RTT p50 ms | RTT p99 ms | RTT asked ms | Mbit/s (one TCP "
        "stream) | of the rate asked | vs unshaped | delay process CPU ms per MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        shape = LinkShape.parse("" if row["shape"] == "unshaped" else row["shape"])
        # h1 to h2 crosses two links each way: four one-way delays a round trip
        asked = 4 * (shape.delay_ms or 0.0)
        rate = _mbit(shape.rate) if shape.rate else None
        of_rate = f"{row['mbit_s'] / rate:.3f}" if rate else "-"
        ratio = row["mbit_s"] / base["mbit_s"] if base["mbit_s"] else 0.0
        cpu = row["delay_cpu_ms_per_mb"]
        lines.append(
            f"| `{row['shape']}` | {row['rtt_p50_ms']} | {row['rtt_p99_ms']} | "
            f"{asked:g} | {row['mbit_s']} | {of_rate} | {ratio:.3f}x | "
            f"{cpu if cpu is not None else '-'} |"
        )
    return "\n".join(lines) + "\n"


def _mbit(rate: str) -> float:
    """A tc rate (``100mbit``) in Mbit/s."""
    units = {"gbit": 1000.0, "mbit": 1.0, "kbit": 0.001, "bit": 1e-6}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    return float(rate) * 1e-6


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    """Round trip and throughput per shape, side by side."""
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only when plotting

    labels = [r["shape"].replace(",", "\n") for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    bars = left.bar(labels, [r["rtt_p50_ms"] for r in rows], color="tab:blue")
    left.bar_label(bars, fontsize="small")
    left.set_title("round trip h1 to h2, p50 ms")
    bars = right.bar(labels, [r["mbit_s"] for r in rows], color="tab:green")
    right.bar_label(bars, fontsize="small")
    right.set_yscale("log")  # an unshaped veth is 50x the 100 Mbit/s links
    right.set_title("one TCP stream h1 to h2, Mbit/s (log scale)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--mb", type=int, default=40, help="MB streamed per shape")
    parser.add_argument("--name", default="netdelay", help="result files' name")
    args = parser.parse_args()
    missing = netns.available()
    if missing is not None:
        sys.exit(f"netdelay bench needs {missing}")
    netns.cleanup(PREFIX, signal.SIGKILL, NETWORK)
    bridge = PREFIX + "br"
    netns.create_bridge(bridge, "10.231.9.254", 24)
    rows = []
    try:
        for host, address in ADDRESSES.items():
            netns.add_host(_ns(host), PREFIX + host, bridge, address, 24)
        for text in SHAPES:
            row = measure(LinkShape.parse(text), args.pings, args.mb * 1_000_000)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        netns.cleanup(PREFIX, signal.SIGKILL, NETWORK)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = markdown(rows)
    (RESULTS / f"{args.name}.json").write_text(
        json.dumps({"at": stamp, "rows": rows}, indent=1) + "\n"
    )
    (RESULTS / f"{args.name}.md").write_text(f"# Link shapes, {stamp}\n\n{table}")
    plot(rows, RESULTS / f"{args.name}.png")
    print(table)


if __name__ == "__main__":
    main()
