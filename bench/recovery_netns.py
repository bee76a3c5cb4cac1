"""Bandwidth-limited recovery for bench/recovery.py: R behind a narrow, distant link.

R runs in its own network namespace (``sr3r``), joined to the root namespace by a
bridge and a veth pair shaped with ``tc tbf`` to 100 Mbit/s in both directions
(built by :mod:`sr3_cli.netns`, as the netns lab's hosts are). Every path to a
ring node goes through a userspace proxy that delays each direction by 10 ms (a
20 ms round trip): this kernel has no ``netem`` qdisc, and tbf alone cannot add
propagation delay. Ring nodes stay on loopback in the root namespace, so
node-to-node relay hops get the 20 ms round trip (relays address nodes as R does,
through the proxies) but not the rate limit: the narrow link is R's, the case
line and tree recovery are for.

Needs root and ``ip``/``tc``; skipped with a message otherwise. The R side runs as
``ip netns exec sr3r python bench/recovery_netns.py --worker JOB.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sr3.client import ClientPool  # noqa: E402 - after the sys.path insert
from sr3.config import NodeConfig, RecoveryConfig, parse_size  # noqa: E402 - after the sys.path insert
from sr3.manifest import Manifest, ShardMeta  # noqa: E402 - after the sys.path insert
from sr3.net import free_port  # noqa: E402 - after the sys.path insert
from sr3.ports import NodeInfo  # noqa: E402 - after the sys.path insert
from sr3.recovery import Recoverer, RecoveryContext  # noqa: E402 - after the sys.path insert
from sr3_cli import netns  # noqa: E402 - after the sys.path insert
from sr3_cli.netns import LinkShape  # noqa: E402 - after the sys.path insert

NS, BRIDGE, VETH = "sr3r", "sr3rbr", "sr3rv"
ROOT_IP, NS_IP = "10.77.0.1", "10.77.0.2"
RATE, ONE_WAY_DELAY_S = "100mbit", 0.010
DELTA_EPOCHS, DELTA_FRACTION = 6, 0.5


@contextlib.contextmanager
def shaped_link() -> Iterator[None]:
    """The namespace on its own bridge, its link tbf-shaped to RATE both ways.

    Built with :mod:`sr3_cli.netns`, as the netns lab's hosts are; every name
    starts with ``sr3r``, which no lab prefix (``sr3`` + hex digits) does.
    """
    _teardown()
    try:
        netns.create_bridge(BRIDGE, ROOT_IP, 24)
        netns.add_host(NS, VETH, BRIDGE, NS_IP, 24)
        netns.shape_link(LinkShape(rate=RATE), veth=VETH, ns=NS)
        yield
    finally:
        _teardown()


def _teardown() -> None:
    netns.cleanup(NS, signal.SIGKILL, None)


# --- the delay proxy (its own process) -------------------------------------------


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float
) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay_s`` late.

    Ends when the reader ends (after delivering what it read) or the writer's
    peer goes away (then reading stops too: a SIGKILLed node mid-transfer).
    """
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(64)

    async def deliver() -> None:
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def receive() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                await queue.put((time.monotonic() + delay_s, data))
        await queue.put(None)

    receiving = asyncio.create_task(receive())
    delivering = asyncio.create_task(deliver())
    await asyncio.wait({receiving, delivering}, return_when=asyncio.FIRST_COMPLETED)
    if delivering.done():
        receiving.cancel()
    await asyncio.gather(receiving, delivering, return_exceptions=True)


async def _serve_proxies(routes: list[tuple[int, int]], delay_s: float) -> None:
    async def handle(
        port: int, r: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            w.close()
            return
        await asyncio.gather(_pump(r, uw, delay_s), _pump(ur, w, delay_s))

    servers = []
    for listen, target in routes:
        servers.append(
            await asyncio.start_server(
                lambda r, w, t=target: handle(t, r, w), ROOT_IP, listen
            )
        )
    await asyncio.Event().wait()


def _proxy_main(routes: list[tuple[int, int]], delay_s: float) -> None:
    asyncio.run(_serve_proxies(routes, delay_s))


def _raw_sender(port_out: Any, total: int) -> None:
    with socket.create_server((ROOT_IP, 0)) as srv:
        port_out.put(srv.getsockname()[1])
        conn, _ = srv.accept()
        block = memoryview(os.urandom(1 << 20))
        with conn:
            sent = 0
            while sent < total:
                n = min(len(block), total - sent)
                conn.sendall(block[:n])
                sent += n


# --- the parent: snapshots, workers, healing -------------------------------------


def run_netns(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    tmp: Path,
    *,
    recover_once: Callable[..., dict[str, Any]],
    spec_for: Callable[[int, str], Any],
    show: Callable[[dict[str, Any]], None],
) -> None:
    """Run the shaped-link scenarios and append their rows."""
    missing = netns.available()
    if missing is not None:
        print(f"[netns] skipped: needs root and iproute2 ({missing})", flush=True)
        return
    from bench.recovery_ring import LoopbackRing
    from sr3_cli.cluster import open_cluster
    from sr3_cli.snapshot_cmd import put_synthetic

    ring = LoopbackRing(tmp / "netlab")
    ctx = multiprocessing.get_context("fork")
    try:
        with shaped_link(), open_cluster(ring.lab.config()) as cluster:
            members = cluster.membership.members()
            routes = {n: (free_port(ROOT_IP), info.port) for n, info in members.items()}
            proxy = ctx.Process(
                target=_proxy_main,
                args=(list(routes.values()), ONE_WAY_DELAY_S),
                daemon=True,
            )
            proxy.start()
            for label in args.netns_sizes.split(","):
                size = parse_size(label)
                spec = spec_for(size, "small")
                for epochs in (1, DELTA_EPOCHS):
                    owner = f"netns/{label}/{epochs}"
                    put_synthetic(
                        cluster,
                        owner=owner,
                        spec=spec,
                        epochs=epochs,
                        update_fraction=DELTA_FRACTION if epochs > 1 else 0.0,
                        show_progress=False,
                    )
                    base = {
                        "network": "wan-100mbit-20ms",
                        "shape": "small",
                        "size": label,
                        "size_bytes": size,
                        "keys": spec.keys,
                        "epochs": epochs,
                    }
                    job = {
                        "owner": owner,
                        "manifest": cluster.manifests.latest(owner).to_dict(),
                        "shards": [
                            m.to_dict()
                            for m in cluster.manifests.shards(owner).values()
                        ],
                        "routes": {n: r[0] for n, r in routes.items()},
                        "secret": cluster.config.node.secret,
                    }
                    for mech, failures in [("auto", 0)] + [
                        (m, f) for f in args.failures for m in ("star", "line", "tree")
                    ]:
                        pids = {n: node.pid for n, node in ring.lab.nodes.items()}
                        run = {
                            **job,
                            "mechanism": mech,
                            "failures": failures,
                            "pids": pids,
                        }
                        try:
                            row = _worker(run, tmp)
                        finally:
                            ring.killed = row_killed = _killed(ring)
                            if row_killed:
                                ring.heal()
                        rows.append({**base, **row})
                        show(rows[-1])
                    if epochs == 1:
                        state_bytes = rows[-1]["state_bytes"]
                        queue = ctx.Queue()
                        sender = ctx.Process(
                            target=_raw_sender, args=(queue, state_bytes)
                        )
                        sender.start()
                        got = _worker(
                            {"kind": "raw", "port": queue.get(), "total": state_bytes},
                            tmp,
                        )
                        sender.join()
                        rows.append(
                            {**base, "mechanism": "raw-loopback", "failures": 0, **got}
                        )
                        rows[-1]["mechanism"] = "raw-link"
                        show(rows[-1])
            proxy.terminate()
    finally:
        ring.close()


def _killed(ring: Any) -> list[str]:
    return [n for n, node in ring.lab.nodes.items() if not node.alive]


def _worker(job: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / "job.json"
    path.write_text(json.dumps(job))
    proc = subprocess.run(
        [*netns.exec_prefix(NS), sys.executable, __file__, "--worker", str(path)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"netns worker failed:\n{proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the worker: R inside the namespace ------------------------------------------


class StaticManifests:
    """The read side of a ManifestStore, from the parent's snapshot of ZooKeeper."""

    def __init__(self, manifest: Manifest, shards: dict[str, ShardMeta]) -> None:
        self._manifest, self._shards = manifest, shards

    def latest(self, owner: str) -> Manifest:
        return self._manifest

    def manifest(self, owner: str, epoch: int) -> Manifest:
        return self._manifest

    def shards(self, owner: str) -> dict[str, ShardMeta]:
        return dict(self._shards)


def worker(path: str) -> None:
    job = json.loads(Path(path).read_text())
    if job.get("kind") == "raw":
        total = job["total"]
        buf = memoryview(bytearray(total))
        t0 = time.perf_counter()
        with socket.create_connection((ROOT_IP, job["port"])) as sock:
            got = 0
            while got < total:
                n = sock.recv_into(buf[got:], min(1 << 20, total - got))
                if not n:
                    break
                got += n
        print(
            json.dumps(
                {"time_to_resume_s": time.perf_counter() - t0, "bytes_received": got}
            )
        )
        return
    from bench.recovery_ring import recover_once

    config = NodeConfig(secret=job["secret"])
    members = {
        n: NodeInfo(node_id=n, host=ROOT_IP, port=port)
        for n, port in job["routes"].items()
    }
    shards = {m["shard_id"]: ShardMeta.from_dict(m) for m in job["shards"]}
    context = RecoveryContext(
        manifests=StaticManifests(Manifest.from_dict(job["manifest"]), shards),  # type: ignore[arg-type]
        members=lambda: dict(members),
        pool=ClientPool(config),
        node_config=config,
        recovery=RecoveryConfig(),
    )

    def kill(node_ids: list[str]) -> None:
        for n in node_ids:
            os.kill(job["pids"][n], signal.SIGKILL)

    row = recover_once(
        Recoverer(context), job["owner"], job["mechanism"], job["failures"], kill
    )
    print(json.dumps(row, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        print(__doc__)
