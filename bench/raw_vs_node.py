"""Raw loopback TCP throughput vs reading the same bytes from ring nodes.

Usage: python bench/raw_vs_node.py [--bytes 1GiB] [--nodes 1] [--repeat 5]

raw:      a sender process streams the bytes with sendall over one connection;
          this process receives them with recv_into (no checks, no copies).
get:      the bytes are stored as 4 MiB shards spread over ``--nodes`` standalone
          nodes (``python -m sr3.server``); ``--threads`` reader threads (one
          per node by default) read each node's shards with NodeClient.get
          (crc32 checked end to end).
get_many: the same with NodeClient.get_many (4 requests pipelined).
get_into: get_many(into=...): payloads land in one reused buffer, crc32 checked
          as they arrive (what SnapshotReader.stream does).

Raw and node runs alternate so that load from elsewhere on the machine hits
both alike; the table shows the median and best of ``--repeat`` runs, and CPU
seconds per GiB of the receiving and the sending side (noise-robust).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.queues import Queue
from pathlib import Path

from sr3.client import NodeClient
from sr3.config import NodeConfig, parse_size

SHARD = 4 * 1024 * 1024
GIB = 1024**3


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raw_sender(port: int, total: int, cpu: Queue[float]) -> None:
    block = memoryview(os.urandom(SHARD))
    start = _own_cpu()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = 0
        while sent < total:
            n = min(SHARD, total - sent)
            sock.sendall(block[:n])
            sent += n
    cpu.put(_own_cpu() - start)


def raw_run(total: int) -> tuple[float, float, float]:
    """Return (bytes/s, receiver CPU s, sender CPU s)."""
    cpu: Queue[float] = multiprocessing.Queue()
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        proc = multiprocessing.Process(target=_raw_sender, args=(port, total, cpu))
        proc.start()
        conn, _ = srv.accept()
        buf = memoryview(bytearray(SHARD))
        got = 0
        start, cpu0 = time.perf_counter(), _own_cpu()
        with conn:
            while got < total:
                n = conn.recv_into(buf)
                if not n:
                    break
                got += n
        elapsed, used = time.perf_counter() - start, _own_cpu() - cpu0
        sender = cpu.get()
        proc.join()
    return got / elapsed, used, sender


class Cluster:
    """Standalone nodes holding ``total`` bytes as 4 MiB shards."""

    def __init__(self, tmp: Path, nodes: int, total: int) -> None:
        self.config = NodeConfig()
        self.procs: list[subprocess.Popen[str]] = []
        self.ports: list[int] = []
        for i in range(nodes):
            self._start(tmp / f"n{i}", f"n{i}")
        block = os.urandom(SHARD)
        crc = zlib.crc32(block)
        self.placement: dict[int, list[str]] = {port: [] for port in self.ports}
        for i in range(total // SHARD):
            port = self.ports[i % nodes]
            self.placement[port].append(f"bench@1#{i}")
        for port, shard_ids in self.placement.items():
            with NodeClient("127.0.0.1", port, config=self.config) as client:
                for shard_id in shard_ids:
                    client.put(shard_id, block, crc)

    def _start(self, data_dir: Path, node_id: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sr3.server", "--data-dir", str(data_dir)]
            + ["--node-id", node_id, "--log-level", "WARNING"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            proc.kill()
            msg = f"node {node_id} did not start: {line!r}"
            raise SystemExit(msg)
        self.procs.append(proc)
        self.ports.append(int(line.split()[1]))

    def read(self, mode: str, threads: int) -> tuple[float, float, float]:
        """Return (bytes/s, client CPU s, node CPU s) of reading every shard."""

        def one_node(port: int) -> int:
            shard_ids = self.placement[port]
            with NodeClient("127.0.0.1", port, config=self.config) as client:
                client.ping()  # connect outside the timing of the first shard
                if mode == "get_many":
                    return sum(len(d) for _, d in client.get_many(shard_ids))
                if mode == "get_into":
                    buffer = bytearray(SHARD)

                    def into(size: int) -> memoryview:
                        return memoryview(buffer)[:size]

                    got = 0
                    for _, view in client.get_many(shard_ids, into=into):
                        got += view.nbytes
                        view.release()
                    return got
                return sum(len(client.get(s)) for s in shard_ids)

        nodes0 = sum(_proc_cpu(p.pid) for p in self.procs)
        start, cpu0 = time.perf_counter(), _own_cpu()
        with ThreadPoolExecutor(threads) as executor:
            got = sum(executor.map(one_node, self.ports))
        elapsed, used = time.perf_counter() - start, _own_cpu() - cpu0
        nodes = sum(_proc_cpu(p.pid) for p in self.procs) - nodes0
        return got / elapsed, used, nodes

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait()


def summarize(runs: list[tuple[float, float, float]], total: int) -> list[float]:
    rates = [r for r, _, _ in runs]
    recv = statistics.median(c for _, c, _ in runs) * GIB / total
    send = statistics.median(c for _, _, c in runs) * GIB / total
    return [statistics.median(rates), max(rates), recv, send]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bytes", default="1GiB")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=0, help="reader threads (default: one per node)"
    )
    args = parser.parse_args()
    total = parse_size(args.bytes) // SHARD * SHARD
    threads = args.threads or args.nodes
    runs: dict[str, list[tuple[float, float, float]]] = {
        "raw": [],
        "get": [],
        "get_many": [],
        "get_into": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), args.nodes, total)
        try:
            readers: dict[str, Callable[[], tuple[float, float, float]]] = {
                "raw": lambda: raw_run(total),
                "get": lambda: cluster.read("get", threads),
                "get_many": lambda: cluster.read("get_many", threads),
                "get_into": lambda: cluster.read("get_into", threads),
            }
            for _ in range(args.repeat):
                for name, read in readers.items():
                    runs[name].append(read())
        finally:
            cluster.close()
    raw_median, raw_best, _, _ = summarize(runs["raw"], total)
    print(f"{total / GIB:.2f} GiB in 4 MiB shards, {args.nodes} node(s), ", end="")
    print(f"{threads} reader thread(s), ", end="")
    print(f"{args.repeat} alternating runs")
    head = ("path", "median MB/s", "best MB/s", "ratio med", "ratio best")
    print("{:<10} {:>12} {:>10} {:>10} {:>10} {:>14} {:>14}".format(
        *head, "recv CPU s/GiB", "send CPU s/GiB"))  # fmt: skip
    for name, samples in runs.items():
        median, best, recv, send = summarize(samples, total)
        print(
            f"{name:<10} {median / 1e6:>12.0f} {best / 1e6:>10.0f} "
            f"{median / raw_median:>10.2f} {best / raw_best:>10.2f} "
            f"{recv:>14.3f} {send:>14.3f}"
        )


if __name__ == "__main__":
    main()
