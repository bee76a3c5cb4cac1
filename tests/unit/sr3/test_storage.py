import logging
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from sr3.errors import ChecksumError, ShardNotFoundError, StorageError
from sr3.replica_file import ReplicaInfo, replica_name, shard_id_from_name
from sr3.storage import ReplicaStore

SHARD = "topo/counter/3@7#0"
DATA = b"replica payload " * 1000
CRC = zlib.crc32(DATA)


@pytest.fixture
def make_store(tmp_path: Path) -> Callable[[], ReplicaStore]:
    return lambda: ReplicaStore(tmp_path)


@pytest.fixture
def store(make_store: Callable[[], ReplicaStore]) -> ReplicaStore:
    return make_store()


def replica_file(store: ReplicaStore, shard_id: str = SHARD) -> Path:
    return store.data_dir / "replicas" / replica_name(shard_id)


def flip_byte(path: Path, offset_from_end: int = 1) -> None:
    raw = bytearray(path.read_bytes())
    raw[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(raw))


def temp_files(store: ReplicaStore) -> list[str]:
    return [p.name for p in (store.data_dir / "replicas").iterdir() if p.name[0] == "."]


def test_put_get_has_list_delete(store: ReplicaStore) -> None:
    assert store.put(SHARD, DATA, CRC) is True
    assert store.get(SHARD) == DATA
    assert store.has(SHARD) == ReplicaInfo(SHARD, len(DATA), CRC)
    assert store.put("topo/other@1#0", b"x", zlib.crc32(b"x"))
    assert [i.shard_id for i in store.list("topo/counter")] == [SHARD]
    assert len(store.list()) == 2 == len(store)
    assert store.total_bytes() == len(DATA) + 1
    assert store.delete(SHARD) is True
    assert store.delete(SHARD) is False
    assert store.has(SHARD) is None
    assert not replica_file(store).exists()
    with pytest.raises(ShardNotFoundError, match="has no replica"):
        store.get(SHARD)


def test_identical_put_is_a_no_op_and_new_content_replaces(store: ReplicaStore) -> None:
    assert store.put(SHARD, DATA, CRC) is True
    assert store.put(SHARD, memoryview(DATA), CRC) is False
    assert store.put(SHARD, b"v2", zlib.crc32(b"v2")) is True
    assert store.get(SHARD) == b"v2"
    assert store.total_bytes() == 2


def test_put_rejects_a_wrong_crc_and_writes_nothing(store: ReplicaStore) -> None:
    with pytest.raises(ChecksumError, match=SHARD):
        store.put(SHARD, DATA, CRC ^ 1)
    assert store.has(SHARD) is None
    assert list((store.data_dir / "replicas").iterdir()) == []


def test_failed_write_leaves_old_replica_and_no_temp_file(
    store: ReplicaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put(SHARD, DATA, CRC)

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError, match="cannot write replica"):
        store.put(SHARD, b"new", zlib.crc32(b"new"))
    monkeypatch.undo()
    assert store.get(SHARD) == DATA
    assert temp_files(store) == []


def test_restart_rebuilds_the_index_and_drops_temp_files(
    make_store: Callable[[], ReplicaStore],
) -> None:
    first = make_store()
    first.put(SHARD, DATA, CRC)
    first.put("a@1#1", b"", 0)
    leftover = first.data_dir / "replicas" / ".tmp-deadbeef"
    leftover.write_bytes(b"half a replica")
    second = make_store()
    assert second.list() == [
        ReplicaInfo("a@1#1", 0, 0),
        ReplicaInfo(SHARD, len(DATA), CRC),
    ]
    assert second.get(SHARD) == DATA
    assert second.get("a@1#1") == b""
    assert not leftover.exists()


def test_flipped_payload_byte_is_detected_then_quarantined_by_verify(
    store: ReplicaStore,
) -> None:
    store.put(SHARD, DATA, CRC)
    flip_byte(replica_file(store))
    # a read reports the corruption but leaves the file for inspection
    with pytest.raises(ChecksumError, match=r"shard 'topo/counter/3@7#0'.*kept"):
        store.get(SHARD)
    assert store.has(SHARD) is not None
    info, data = store.read(SHARD, verify=False)  # length checks only
    assert (info.crc32, len(data)) == (CRC, len(DATA))
    with pytest.raises(ChecksumError):
        list(store.iter_chunks(SHARD, 4096))
    # verify moves it to quarantine: no longer offered, nothing else lost
    assert store.verify(SHARD) is False
    assert store.has(SHARD) is None
    assert not replica_file(store).exists()
    assert len(list((store.data_dir / "quarantine").iterdir())) == 1
    assert store.put(SHARD, DATA, CRC) is True
    assert store.get(SHARD) == DATA


def test_put_over_a_corrupt_replica_replaces_it(store: ReplicaStore) -> None:
    store.put(SHARD, DATA, CRC)
    flip_byte(replica_file(store))
    assert store.put(SHARD, DATA, CRC) is True
    assert store.get(SHARD) == DATA
    assert store.verify(SHARD) is True


def test_truncated_or_extended_payload_is_corrupt(store: ReplicaStore) -> None:
    store.put(SHARD, DATA, CRC)
    path = replica_file(store)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ChecksumError, match="header promises"):
        store.get(SHARD)
    path.write_bytes(path.read_bytes() + b"0123456789!")
    with pytest.raises(ChecksumError):
        store.get(SHARD)


def test_bad_headers_are_quarantined_at_start(
    make_store: Callable[[], ReplicaStore], caplog: pytest.LogCaptureFixture
) -> None:
    first = make_store()
    first.put(SHARD, DATA, CRC)
    first.put("good@1#0", b"ok", zlib.crc32(b"ok"))
    replicas = first.data_dir / "replicas"
    (replicas / "garbage").write_bytes(b"not a replica at all")
    flip_byte(replica_file(first), offset_from_end=len(DATA) + 2)  # header crc
    os.replace(replicas / "good@1#0", replicas / "renamed")
    with caplog.at_level(logging.WARNING, logger="sr3.storage"):
        second = make_store()
    assert second.list() == []
    quarantined = sorted(
        p.name.split(".")[0] for p in (second.data_dir / "quarantine").iterdir()
    )
    assert quarantined == sorted(["garbage", replica_name(SHARD), "renamed"])
    assert caplog.text.count("quarantining") == 3
    assert second.put(SHARD, DATA, CRC) is True


def test_replica_names_are_safe_and_reversible() -> None:
    for shard_id in ["o/c/1@2#3", ".hidden", "..", "a%b", "zone é/1@1#1", "x" * 60]:
        name = replica_name(shard_id)
        assert "/" not in name
        assert not name.startswith(".")
        assert shard_id_from_name(name) == shard_id
    long_name = replica_name("y" * 300)
    assert len(long_name) < 255
    assert shard_id_from_name(long_name) is None


@pytest.mark.parametrize("bad", ["", 7, "x" * 5000])
def test_invalid_shard_ids_are_refused(store: ReplicaStore, bad: object) -> None:
    with pytest.raises(StorageError, match="shard id"):
        store.put(bad, b"", 0)  # type: ignore[arg-type]


def test_long_shard_id_round_trips(make_store: Callable[[], ReplicaStore]) -> None:
    shard_id = "owner/" * 60 + "@1#0"
    make_store().put(shard_id, DATA, CRC)
    assert make_store().get(shard_id) == DATA


def test_chunked_reads_and_empty_payload(store: ReplicaStore) -> None:
    store.put(SHARD, DATA, CRC)
    assert b"".join(store.iter_chunks(SHARD, 4096)) == DATA
    store.put("empty@1#0", b"", 0)
    assert list(store.iter_chunks("empty@1#0", 4096)) == [b""]
    assert store.verify("empty@1#0")
    with pytest.raises(ShardNotFoundError):
        store.verify("missing@1#0")


def test_concurrent_puts_and_reads(store: ReplicaStore) -> None:
    payloads = {f"s@1#{i}": os.urandom(2000) for i in range(40)}
    errors: list[BaseException] = []

    def worker(items: list[tuple[str, bytes]]) -> None:
        try:
            for shard_id, data in items:
                store.put(shard_id, data, zlib.crc32(data))
                assert store.get(shard_id) == data
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    items = list(payloads.items())
    threads = [threading.Thread(target=worker, args=(items[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.total_bytes() == 40 * 2000
    assert {i.shard_id for i in store.list()} == set(payloads)


def test_reader_exposes_the_payload_for_a_zero_copy_sender(
    store: ReplicaStore,
) -> None:
    store.put(SHARD, DATA, CRC)
    with store.open_reader(SHARD, verify=False) as reader:
        assert os.pread(reader.fileno(), reader.remaining, reader.offset) == DATA
