"""Standalone ring nodes as real processes: ops, pull, hostile input, crashes."""

import asyncio
import os
import socket
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sr3 import frame_io, wire
from sr3.client import ClientPool, NodeClient
from sr3.config import NodeConfig
from sr3.errors import (
    AuthenticationError,
    ChecksumError,
    ConfigError,
    NodeUnavailableError,
    ProtocolError,
    ShardNotFoundError,
    StorageError,
)
from sr3.replica_file import ReplicaInfo, replica_name
from sr3.server import Connection, NodeServer, require
from sr3.storage import ReplicaStore

SECRET = "integration-secret"  # noqa: S105 - a test secret
CONFIG = NodeConfig(secret=SECRET, io_timeout_s=20, max_frame_bytes=8 * 1024 * 1024)
SHARD = "topo/counter/3@7#0"
DATA = os.urandom(3 * 1024 * 1024 + 17)
CRC = zlib.crc32(DATA)


@dataclass
class Node:
    proc: "subprocess.Popen[str]"
    port: int
    data_dir: Path
    log: Path

    def client(self, config: NodeConfig = CONFIG) -> NodeClient:
        return NodeClient("127.0.0.1", self.port, config=config)


@dataclass
class Launcher:
    tmp_path: Path
    nodes: list[Node] = field(default_factory=list)

    def start(
        self,
        name: str,
        *,
        data_dir: Path | None = None,
        peers: tuple[int, ...] = (),
        **env: str,
    ) -> Node:
        data_dir = data_dir or self.tmp_path / name
        secret_file = self.tmp_path / "secret"
        secret_file.write_text(SECRET + "\n")
        log = self.tmp_path / f"{name}-{len(self.nodes)}.log"
        environ = {**os.environ, "SR3_NODE_MAX_FRAME_BYTES": "8MiB", **env}
        with log.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sr3.server", "--port", "0"]
                + ["--data-dir", str(data_dir), "--node-id", name]
                + ["--secret-file", str(secret_file)]
                + [f"--peer=127.0.0.1:{port}" for port in peers],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=environ,
            )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until READY or the process exits
        if not line.startswith("READY "):
            proc.kill()
            pytest.fail(f"node {name} did not start: {line!r}\n{log.read_text()}")
        node = Node(proc, int(line.split()[1]), data_dir, log)
        self.nodes.append(node)
        return node

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.terminate()
                try:
                    node.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
            print(f"--- {node.log.name} ---\n{node.log.read_text()}")  # on failure


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    nodes = Launcher(tmp_path)
    yield nodes
    nodes.stop_all()


@pytest.fixture
def node(launcher: Launcher) -> Node:
    started = launcher.start("n1")
    with started.client() as client:
        assert client.put(SHARD, DATA, CRC)
    return started


def assert_serves_stored(node: Node) -> None:
    """A fresh authenticated client still gets the stored shard byte-identical."""
    with node.client() as client:
        assert client.get(SHARD) == DATA
        assert client.list() == [ReplicaInfo(SHARD, len(DATA), CRC)]


def test_ops_round_trip(node: Node) -> None:
    with node.client() as client:
        assert client.ping() == "n1"
        assert client.put(SHARD, DATA, CRC) is False
        assert client.get(SHARD) == DATA
        assert client.has(SHARD) == ReplicaInfo(SHARD, len(DATA), CRC)
        assert client.has("missing@1#0") is None
        assert client.verify(SHARD) is True
        chunks = list(client.stream(SHARD, chunk_bytes=1024 * 1024))
        assert [len(c) for c in chunks] == [1024 * 1024] * 3 + [17]
        assert b"".join(chunks) == DATA
        assert client.put("empty@1#0", b"", 0) is True
        assert list(client.stream("empty@1#0")) == [b""]
        assert client.get("empty@1#0") == b""
        assert [i.shard_id for i in client.list("empty")] == ["empty@1#0"]
        assert client.stats() == {"node_id": "n1", "shards": 2, "bytes": len(DATA)}
        assert client.delete("empty@1#0") is True
        assert client.delete("empty@1#0") is False
        where = r"127\.0\.0\.1:\d+.*'missing@1#0'"
        with pytest.raises(ShardNotFoundError, match=where):
            client.get("missing@1#0")
        with pytest.raises(ShardNotFoundError):
            client.verify("missing@1#0")
        assert client.ping() == "n1"  # error replies keep the connection usable


def reusable(client: NodeClient) -> bool:
    return client.reusable


def test_get_many_pipelines_and_fails_cleanly(node: Node) -> None:
    payloads = {f"many@1#{i}": os.urandom(100_000 + i) for i in range(9)}
    with node.client() as client:
        for shard_id, data in payloads.items():
            client.put(shard_id, data, zlib.crc32(data))
        assert dict(client.get_many(payloads, window=3)) == payloads
        assert reusable(client)
        wanted = [*list(payloads)[:4], "missing@1#0", *list(payloads)[4:]]
        got = []
        with pytest.raises(ShardNotFoundError, match="missing@1#0"):
            for shard_id, _ in client.get_many(wanted):
                got.append(shard_id)
        assert got == wanted[:4]
        assert not reusable(client)  # replies were still queued: closed
        many = client.get_many(payloads)
        next(many)
        many.close()  # abandoned early
        assert not reusable(client)
        assert client.get(SHARD) == DATA  # reconnects


def test_get_many_into_receives_in_place_and_checks(node: Node) -> None:
    payloads = {f"into@1#{i}": os.urandom(300_000 * i + i) for i in range(5)}
    buffer = bytearray(max(len(p) for p in payloads.values()))
    asked: list[int] = []

    def into(size: int) -> memoryview:
        asked.append(size)
        return memoryview(buffer)[:size]

    with node.client() as client:
        for shard_id, data in payloads.items():
            client.put(shard_id, data, zlib.crc32(data))
        for shard_id, view in client.get_many(payloads, window=2, into=into):
            assert view.obj is buffer
            assert view == payloads[shard_id]
            view.release()
        assert asked == [len(p) for p in payloads.values()]
        assert reusable(client)
        corrupt_file(node, "into@1#4")
        wanted = ["into@1#1", "missing@1#0"]
        with pytest.raises(ShardNotFoundError, match="missing@1#0"):
            list(client.get_many(wanted, into=into))
        with pytest.raises(ChecksumError, match="into@1#4"):
            list(client.get_many(["into@1#4"], into=into))
        assert client.ping() == "n1"


def test_pool_reuses_connections_and_survives_a_restart(
    launcher: Launcher, node: Node
) -> None:
    pool = ClientPool(CONFIG)
    with pool.client(("127.0.0.1", node.port)) as first:
        first.ping()
    with pool.client(("127.0.0.1", node.port)) as second:
        assert second is first
        with pytest.raises(ShardNotFoundError):
            second.get("missing@1#0")
    node.proc.terminate()  # SIGTERM with an idle pooled connection open
    assert node.proc.wait(timeout=30) == 0
    assert "node n1 closed" in node.log.read_text()
    with pool.client(("127.0.0.1", node.port)) as third:
        assert third is first
        with pytest.raises(NodeUnavailableError, match=str(node.port)):
            third.ping()
    with pool.client(("127.0.0.1", node.port)) as fourth:
        assert fourth is not first  # a broken connection is not pooled
    pool.close_all()


def test_pull_copies_and_repairs_between_nodes(launcher: Launcher, node: Node) -> None:
    other = launcher.start("n2", peers=(node.port,))
    with other.client() as client:
        assert client.pull(SHARD, CRC, "127.0.0.1", node.port) is True
        assert client.get(SHARD) == DATA
        assert client.pull(SHARD, CRC, "127.0.0.1", node.port) is False
        corrupt_file(other, SHARD)
        assert client.verify(SHARD) is False
        assert client.pull(SHARD, CRC, "127.0.0.1", node.port) is True
        assert client.verify(SHARD) is True
        with pytest.raises(ShardNotFoundError, match="missing@1#0"):
            client.pull("missing@1#0", 1, "127.0.0.1", node.port)
        with pytest.raises(ChecksumError, match="another crc32"):
            client.pull(SHARD, CRC ^ 1, "127.0.0.1", node.port)
        node.proc.terminate()
        node.proc.wait()
        with pytest.raises(StorageError, match=f"from 127.0.0.1:{node.port}"):
            client.pull("y@1#0", CRC, "127.0.0.1", node.port)
        assert client.list() == [ReplicaInfo(SHARD, len(DATA), CRC)]


def test_pull_copies_only_from_peers(launcher: Launcher, node: Node) -> None:
    # a pull names the address the node connects to: one that is no ring
    # member's (any host:port a peer chooses) is refused before connecting
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        elsewhere = listener.getsockname()[1]
        other = launcher.start("n2", peers=(node.port,))
        alone = launcher.start("n3")
        with other.client() as client:
            with pytest.raises(ProtocolError, match=f"127.0.0.1:{elsewhere} is not"):
                client.pull(SHARD, CRC, "127.0.0.1", elsewhere)
            with pytest.raises(ProtocolError, match="not the address of a current"):
                client.pull(SHARD, CRC, "localhost", node.port)
            assert client.list() == []
            assert client.pull(SHARD, CRC, "127.0.0.1", node.port) is True
        with alone.client() as client:
            with pytest.raises(ProtocolError, match="--peer 127.0.0.1:"):
                client.pull(SHARD, CRC, "127.0.0.1", node.port)
            assert client.ping() == "n3"
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody was made to connect here
    assert_serves_stored(other)


def corrupt_file(node: Node, shard_id: str) -> None:
    path = node.data_dir / "replicas" / replica_name(shard_id)
    raw = bytearray(path.read_bytes())
    raw[-1000] ^= 0x01
    path.write_bytes(bytes(raw))


def test_flipped_byte_on_disk_is_reported(node: Node) -> None:
    corrupt_file(node, SHARD)
    with node.client() as client:
        with pytest.raises(ChecksumError, match="'topo/counter/3@7#0'"):
            client.get(SHARD)
        with pytest.raises(ChecksumError, match="topo/counter/3@7#0"):
            list(client.stream(SHARD))
        # verify quarantines the bad copy: the node stops offering it
        assert client.verify(SHARD) is False
        assert client.has(SHARD) is None
        with pytest.raises(ShardNotFoundError):
            client.get(SHARD)
        assert client.ping() == "n1"
        assert client.put(SHARD, DATA, CRC) is True  # repair overwrites it
        assert client.get(SHARD) == DATA


def test_a_range_read_sends_those_bytes_only_and_checks_them(node: Node) -> None:
    offset, length = 1024 * 1024 + 5, 300_000
    part = DATA[offset : offset + length]
    with node.client() as client:
        assert client.get_range(SHARD, offset, length, zlib.crc32(part)) == part
        assert client.get_range(SHARD, len(DATA), 0, 0) == b""
        with pytest.raises(ProtocolError, match="not inside its 3145745-byte payload"):
            client.get_range(SHARD, len(DATA) - 10, 11, 0)
        with pytest.raises(ProtocolError, match="not inside"):
            client.get_range(SHARD, -1, 10, 0)
        with pytest.raises(ChecksumError, match="fail crc32"):
            client.get_range(SHARD, offset, length, zlib.crc32(part) ^ 1)
        corrupt_file(node, SHARD)  # a byte 1000 from the end flips
        tail = len(DATA) - 2000
        with pytest.raises(ChecksumError, match="read another replica"):
            client.get_range(SHARD, tail, 2000, zlib.crc32(DATA[tail:]))
        # the bytes before the flip are intact and still served
        assert client.get_range(SHARD, offset, length, zlib.crc32(part)) == part
        assert client.ping() == "n1"


def test_wrong_secret_is_refused(node: Node) -> None:
    wrong = NodeConfig(secret="not-the-secret")  # noqa: S106 - a test secret
    with pytest.raises(AuthenticationError, match="sr3.node.secret"):
        node.client(wrong).ping()
    assert_serves_stored(node)


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_another_protocol_version_is_named_as_such(node: Node, version: Any) -> None:
    with socket.create_connection(("127.0.0.1", node.port), timeout=20) as sock:
        hello = frame_io.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
        mac = wire.auth_mac(SECRET, hello["nonce"])  # the right secret
        frame_io.send_frame(sock, {"v": version, "op": "auth", "mac": mac})
        reply = frame_io.recv_frame(sock, 4096)
        assert reply["ok"] is False and reply["code"] == "auth"
        assert "n1 speaks protocol v1, this client v" in reply["error"]
        assert "run the same sr3 version on clients and nodes" in reply["error"]
        assert "secret" not in reply["error"]
        assert sock.recv(1) == b""
    assert_serves_stored(node)


def raw_socket(node: Node, *, authenticate: bool = True) -> socket.socket:
    return raw_socket_to(node.port, authenticate=authenticate)


def raw_socket_to(port: int, *, authenticate: bool = True) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    hello = frame_io.recv_frame(sock, wire.HANDSHAKE_MAX_FRAME_BYTES)
    assert hello["op"] == "hello" and hello["v"] == 1 and len(hello["nonce"]) == 32
    if authenticate:
        mac = wire.auth_mac(SECRET, hello["nonce"])
        frame_io.send_frame(sock, {"v": 1, "op": "auth", "mac": mac})
        reply = frame_io.recv_frame(sock, 4096)
        assert reply["ok"] is True and isinstance(reply["node_id"], str)
    return sock


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def request(**fields: Any) -> bytes:
    return frame(msgpack.packb({"v": 1, **fields}))


def nested(depth: int) -> bytes:
    return b"\x81\xa2op" + b"\x91" * depth + b"\xc0"


def put(**fields: Any) -> bytes:
    return request(op="put", **{"shard": "p@1#0", "data": b"x", "crc": 0, **fields})


def stream(**fields: Any) -> bytes:
    return request(op="stream", shard=SHARD, **fields)


def pull(source: object) -> bytes:
    return request(op="pull", shard="p@1#0", crc=0, source=source)


# name: (authenticate, bytes sent, expected error code, connection closed after)
HOSTILE = {
    "http before auth": (False, b"GET / HTTP/1.1\r\n\r\n", "too_large", True),
    "big frame before auth": (False, frame(b"\x80" * 5000), "too_large", True),
    "garbage map before auth": (False, frame(b"\x81\xc1"), "bad_frame", True),
    "request before auth": (False, request(op="get", shard=SHARD), "auth", True),
    "auth without mac": (False, request(op="auth"), "auth", True),
    "wrong mac": (False, request(op="auth", mac=b"x" * 32), "auth", True),
    "garbage": (True, b"\xff\xfe\xfd\xfc" + os.urandom(64), "too_large", True),
    "oversize length": (True, struct.pack(">I", (8 << 20) + 1), "too_large", True),
    "not msgpack": (True, frame(b"\xc1\xc1"), "bad_frame", True),
    "not a map": (True, frame(msgpack.packb(["get", SHARD])), "bad_frame", True),
    "int map key": (True, frame(b"\x81\x01\x02"), "bad_frame", True),
    "deep nesting": (True, frame(nested(100_000)), "bad_frame", True),
    "moderate nesting": (True, frame(nested(500)), "bad_frame", True),
    "huge str": (True, frame(b"\x81\xa2op\xdb\xff\xff\xff\xff"), "bad_frame", True),
    "huge bin": (True, frame(b"\x81\xa2op\xc6\xff\xff\xff\xff"), "bad_frame", True),
    "huge array": (True, frame(b"\x81\xa2op\xdd\xff\xff\xff\xff"), "bad_frame", True),
    "huge map": (True, frame(b"\xdf\xff\xff\xff\xff"), "bad_frame", True),
    "ext type": (True, frame(b"\x81\xa2op\xd4\x01\x00"), "bad_frame", True),
    "empty ext type": (True, frame(b"\x81\xa2op\xc7\x00\x01"), "bad_frame", True),
    "unknown op": (True, request(op="format_disk"), "unknown_op", False),
    "op not a string": (True, request(op=7), "unknown_op", False),
    "no version": (True, frame(msgpack.packb({"op": "ping"})), "bad_request", False),
    "wrong version": (True, request(v=2, op="ping"), "bad_request", False),
    "missing shard": (True, request(op="get"), "bad_request", False),
    "shard not a string": (True, request(op="get", shard=5), "bad_request", False),
    "empty shard": (True, request(op="has", shard=""), "bad_request", False),
    "data not bytes": (True, put(data="x"), "bad_request", False),
    "crc is bool": (True, put(crc=False), "bad_request", False),
    "crc negative": (True, put(crc=-1), "bad_request", False),
    "crc too big": (True, put(crc=1 << 32), "bad_request", False),
    "crc mismatch": (True, put(crc=1), "corrupt", False),
    "overwrite with bad crc": (True, put(shard=SHARD), "corrupt", False),
    "prefix not a string": (True, request(op="list", prefix=[]), "bad_request", False),
    "zero chunk": (True, stream(chunk_bytes=0), "bad_request", False),
    "chunk not an int": (True, stream(chunk_bytes="1"), "bad_request", False),
    "source not a map": (True, pull("x"), "bad_request", False),
    "port not an int": (True, pull({"host": "h", "port": "1"}), "bad_request", False),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_gets_an_error_and_the_node_keeps_serving(
    node: Node, case: tuple[bool, bytes, str, bool]
) -> None:
    authenticate, payload, code, closes = case
    with raw_socket(node, authenticate=authenticate) as sock:
        peer = f"127.0.0.1:{sock.getsockname()[1]}"
        sock.sendall(payload)
        reply = frame_io.recv_frame(sock, CONFIG.max_frame_bytes)
        assert reply["ok"] is False and reply["code"] == code, reply
        assert isinstance(reply["error"], str) and reply["error"]
        if closes:
            assert sock.recv(1) == b""
        else:  # the same connection goes on serving
            sock.sendall(request(op="ping"))
            assert frame_io.recv_frame(sock, 4096)["node_id"] == "n1"
    assert "WARNING sr3.server" in node.log.read_text()
    assert peer in node.log.read_text()
    assert_serves_stored(node)


@pytest.mark.parametrize(
    "payload",
    [b"\x00\x00", struct.pack(">I", 999) + b"\x81\xa2op", request(op="ping") + b"\x00"],
    ids=["inside the length", "inside the body", "after a frame"],
)
def test_client_vanishing_mid_frame(node: Node, payload: bytes) -> None:
    with raw_socket(node) as sock:
        sock.sendall(payload)
    assert_serves_stored(node)


def test_stalled_peers_are_disconnected(launcher: Launcher) -> None:
    node = launcher.start("n1", SR3_NODE_IO_TIMEOUT_S="1")
    with raw_socket(node, authenticate=False) as sock:  # never answers hello
        assert sock.recv(1) == b""
    with raw_socket(node) as sock:  # stops inside a frame
        sock.sendall(struct.pack(">I", 100) + b"\x81")
        assert sock.recv(1) == b""
    with node.client() as client:
        assert client.ping() == "n1"


def test_sigkill_mid_put_keeps_every_acknowledged_replica(launcher: Launcher) -> None:
    victim = launcher.start("victim")
    acked: list[tuple[str, bytes]] = []
    enough = threading.Event()
    lock = threading.Lock()

    def writer(name: str) -> None:
        with victim.client() as client:
            for seq in range(10_000):
                data = os.urandom(512 * 1024 + seq)
                shard_id = f"kill/{name}@1#{seq}"
                try:
                    client.put(shard_id, data, zlib.crc32(data))
                except NodeUnavailableError:
                    return
                with lock:
                    acked.append((shard_id, data))
                    if len(acked) >= 24:
                        enough.set()

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    assert enough.wait(timeout=120)
    victim.proc.kill()
    victim.proc.wait()
    for thread in threads:
        thread.join(timeout=60)
    revived = launcher.start("victim", data_dir=victim.data_dir)
    with revived.client() as client:
        for shard_id, data in acked:
            assert client.get(shard_id) == data
        listed = client.list()
        assert len(listed) - len(acked) <= len(threads)  # puts done but not acked
        for info in listed:
            assert client.verify(info.shard_id), info
    leftovers = sorted(p.name for p in (victim.data_dir / "replicas").iterdir())
    assert [name for name in leftovers if name.startswith(".")] == []
    assert len(leftovers) == len(listed)
    assert list((victim.data_dir / "quarantine").iterdir()) == []


def test_register_op_extends_an_in_process_server(tmp_path: Path) -> None:
    server = NodeServer(ReplicaStore(tmp_path), node_id="ext", config=CONFIG)

    async def echo(conn: Connection, request: dict[str, Any]) -> None:
        text = require(request, "text", str)
        if text == "missing":
            msg = "nothing called missing"
            raise ShardNotFoundError(msg)
        if text == "bug":
            msg = "a bug in the handler"
            raise RuntimeError(msg)
        for part in ("one", "two"):  # several frames, ended by the last
            await conn.ok({"echo": text, "part": part, "last": part == "two"})

    server.register_op("echo", echo)
    with pytest.raises(ConfigError, match="already registered"):
        server.register_op("get", echo)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        with NodeClient("127.0.0.1", server.port, config=CONFIG) as client:
            assert client.ping() == "ext"
            with pytest.raises(ShardNotFoundError, match="nothing called missing"):
                client.request("echo", {"text": "missing"})
            with pytest.raises(ProtocolError, match="'text' of type str"):
                client.request("echo", {"text": 1})
            with pytest.raises(StorageError, match="a bug in the handler"):
                client.request("echo", {"text": "bug"})  # internal, then closed
            with raw_socket_to(server.port) as sock:
                sock.sendall(request(op="echo", text="hi"))
                first = frame_io.recv_frame(sock, 4096)
                second = frame_io.recv_frame(sock, 4096)
            assert (first["part"], first["last"]) == ("one", False)
            assert second["last"] is True
            asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
            with pytest.raises(NodeUnavailableError):
                client.ping()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_unreachable_and_silent_nodes_are_unavailable() -> None:
    quick = NodeConfig(secret=SECRET, io_timeout_s=0.3, connect_timeout_s=0.3)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never says hello
        port = silent.getsockname()[1]
        with pytest.raises(NodeUnavailableError, match=f"127.0.0.1:{port}.*0.3s"):
            NodeClient("127.0.0.1", port, config=quick).get(SHARD)
    with pytest.raises(NodeUnavailableError, match="is the node running"):
        NodeClient("127.0.0.1", port, config=quick).ping()  # refused: now closed
