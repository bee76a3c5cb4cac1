"""Baselines for bench/recovery.py: raw loopback copy, Redis (Storm), Spark state store.

Each returns seconds from "recovery start" until the process could serve a read of
any key, for the same keys and values the ring snapshot holds.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu import own_cpu_s  # noqa: E402 - after sys.path
from sr3.buffers import fresh_buffer  # noqa: E402 - after sys.path
from sr3.codec import decode_key, decode_value, encode_key, encode_value  # noqa: E402
from sr3.synthetic import SyntheticSpec, expected_value  # noqa: E402

CHUNK = 4 * 1024 * 1024


# --- raw loopback -------------------------------------------------------------


def _raw_sender(port: int, total: int) -> None:
    # ``total`` bytes at distinct addresses, as a holder's shards are: sending one
    # small buffer over and over would stay in the CPU cache and flatter the link
    block = os.urandom(1024 * 1024)
    payload = memoryview((block * (total // len(block) + 1))[:total])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.recv(1)  # the receiver's clock starts before it says go
        started = own_cpu_s()
        sent = 0
        while sent < total:
            n = min(CHUNK, total - sent)
            sock.sendall(payload[sent : sent + n])
            sent += n
        # the CPU the sending cost, for the receiver's report
        sock.sendall(struct.pack("<d", own_cpu_s() - started))


def raw_loopback(total: int, *, keep: bool = True) -> float:
    """Seconds to receive ``total`` bytes from another process on one socket."""
    return float(raw_loopback_run(total, keep=keep)["time_to_resume_s"])


def raw_loopback_run(total: int, *, keep: bool = True) -> dict[str, float]:
    """Receive ``total`` bytes from another process on one socket.

    Returns the seconds taken (``time_to_resume_s``), the receiver's CPU seconds
    (``r_cpu_s``) and the sender's (``holders_cpu_s``), both while the clock ran.

    With ``keep`` (the baseline R is compared with) the receiver allocates a fresh
    4 MiB buffer per 4 MiB received (with :func:`sr3.buffers.fresh_buffer`, as R
    does) and keeps them all, as a recovering process must keep every shard it
    receives; allocating and first touching 1 GB costs 0.4 to 2 s on these
    machines. Without it, everything lands in one buffer
    touched before the clock starts: the bound of the loopback link alone.
    """
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        proc = multiprocessing.get_context("fork").Process(
            target=_raw_sender, args=(port, total)
        )
        proc.start()
        conn, _ = srv.accept()
        kept: list[memoryview] = []
        whole = None if keep else memoryview(bytearray(total))
        got = 0
        with conn:
            started = time.perf_counter()
            cpu_started = own_cpu_s()
            conn.sendall(b"g")
            while got < total:
                size = min(CHUNK, total - got)
                if whole is None:
                    view = fresh_buffer(size)  # as R allocates what it keeps
                    kept.append(view)
                else:
                    view = whole[got : got + size]
                filled = 0
                while filled < size:
                    n = conn.recv_into(view[filled:])
                    if not n:
                        msg = f"raw sender stopped after {got + filled} bytes"
                        raise RuntimeError(msg)
                    filled += n
                got += size
            seconds = time.perf_counter() - started
            r_cpu = own_cpu_s() - cpu_started
            tail = bytearray(8)
            conn.recv_into(tail, 8, socket.MSG_WAITALL)
        proc.join()
    sender_cpu = struct.unpack("<d", tail)[0]
    return {"time_to_resume_s": seconds, "r_cpu_s": r_cpu, "holders_cpu_s": sender_cpu}


# --- Redis, as Storm's RedisKeyValueState keeps a task's state ----------------------


class RedisServer:
    """A throw-away redis-server on a free loopback port (no persistence)."""

    def __init__(self) -> None:
        self.installed_now = False
        if shutil.which("redis-server") is None:
            print("redis-server missing: apt-get install -y redis-server", flush=True)
            subprocess.run(
                ["apt-get", "install", "-y", "-q", "redis-server"], check=True
            )
            self.installed_now = True
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port, socket_timeout=600)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def redis_load(server: RedisServer, ns: str, spec: SyntheticSpec) -> float:
    """HSET every key of ``spec`` into hash ``ns`` (msgpack key and value)."""
    client = server.client
    client.delete(ns)
    started = time.perf_counter()
    batch: dict[bytes, bytes] = {}
    size = 0
    for i in range(spec.keys):
        key = ("k", i)
        value = encode_value(expected_value(spec, key))
        batch[encode_key(key)] = value
        size += len(value)
        if len(batch) >= 2000 or size >= 32 << 20:
            client.hset(ns, mapping=batch)
            batch, size = {}, 0
    if batch:
        client.hset(ns, mapping=batch)
    return time.perf_counter() - started


def redis_restore(server: RedisServer, ns: str, spec: SyntheticSpec) -> dict[str, Any]:
    """HGETALL + msgpack decode of every entry, as a restored task would.

    It runs in a new Python process, as a restarted task is: a process that
    restored before keeps the freed heap of the last restore and fills it again
    without a page fault (restores of 1 GB in the benchmark's own process took
    4.3 s warm and 11.5 s cold in one run), while R receives into fresh memory
    every time.
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_restore_in_child, args=(server.port, ns, child))
    proc.start()
    child.close()
    try:
        got: dict[str, Any] = parent.recv()
    except EOFError as exc:
        proc.join()
        msg = f"redis restore process died (exit {proc.exitcode})"
        raise RuntimeError(msg) from exc
    finally:
        proc.join()
    if got["keys"] != spec.keys:
        msg = f"redis restored {got['keys']} of {spec.keys} keys"
        raise RuntimeError(msg)
    return got


def _restore_in_child(port: int, ns: str, out: Any) -> None:
    import redis

    client = redis.Redis(port=port, socket_timeout=600)
    client.ping()  # connected before the clock starts, as R's ring client is
    started = time.perf_counter()
    raw = client.hgetall(ns)
    fetched = time.perf_counter() - started
    state = {decode_key(k): decode_value(v) for k, v in raw.items()}
    seconds = time.perf_counter() - started
    out.send({"seconds": seconds, "hgetall_s": fetched, "keys": len(state)})


# --- Spark state store -----------------------------------------------------------


def spark_restart(spec: SyntheticSpec, provider: str, workdir: Path) -> dict[str, Any]:
    """Build an applyInPandasWithState checkpoint, then time a restart from it."""
    env = dict(os.environ)
    env.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONWARNINGS"] = "ignore"
    d = Path(tempfile.mkdtemp(prefix=f"spark-{provider}-", dir=workdir))
    script = str(ROOT / "bench" / "recovery_spark.py")
    common = ["--dir", str(d), "--provider", provider]
    value_bytes = spec.value_size(0)
    out: dict[str, Any] = {}
    for phase, extra in (
        ("build", ["--keys", str(spec.keys), "--value-bytes", str(value_bytes)]),
        ("restart", []),
    ):
        proc = subprocess.run(
            [sys.executable, script, phase, *common, *extra],
            capture_output=True,
            text=True,
            env=env,
            timeout=3600,
            check=False,
        )
        if proc.returncode != 0:
            tail = proc.stderr[-1500:]
            msg = f"spark {phase} ({provider}) failed:\n{tail}"
            raise RuntimeError(msg)
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    out["checkpoint_bytes"] = sum(
        p.stat().st_size for p in (d / "ckpt").rglob("*") if p.is_file()
    )
    shutil.rmtree(d, ignore_errors=True)
    return out
