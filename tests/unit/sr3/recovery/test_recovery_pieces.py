"""Pieces, chain adjacency, tree-style merging and R's assembly (pure, no sockets)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sr3 import codec
from sr3.errors import ChecksumError, RecoveryError
from sr3.manifest import Manifest, ShardMeta
from sr3.recovery.pieces import Assembly, ChainIndex, Piece, merge_pieces
from sr3.recovery.tree import children_of
from sr3.state import KeyedState

G = 8
OWNER = "t/o"

Chain = list[tuple[int, str, dict[int, bytes]]]  # (epoch, kind, kg -> blob)


def random_chain(seed: int, epochs: int, keys: int = 60) -> tuple[Chain, dict]:
    """A base and deltas with upserts and deletes; returns it and the final model."""
    rng = random.Random(seed)
    model: dict[bytes, dict[str, Any]] = {}
    chain: Chain = []
    for epoch in range(1, epochs + 1):
        if epoch == 1:
            for i in range(keys):
                model[codec.encode_key(("k", i))] = {"v": rng.randbytes(8)}
            groups: dict[int, dict[bytes, Any]] = {}
            for k, v in model.items():
                groups.setdefault(_kg(k), {})[k] = v
            chain.append(
                (
                    epoch,
                    "full",
                    {kg: codec.encode_key_group_raw(e) for kg, e in groups.items()},
                )
            )
            continue
        ups: dict[int, dict[bytes, Any]] = {}
        dels: dict[int, list[bytes]] = {}
        for _ in range(rng.randint(0, keys // 3)):
            k = codec.encode_key(("k", rng.randrange(keys + 20)))
            if rng.random() < 0.25 and k in model:
                del model[k]
                dels.setdefault(_kg(k), []).append(k)
                ups.get(_kg(k), {}).pop(k, None)
            else:
                model[k] = {"v": rng.randbytes(8)}
                ups.setdefault(_kg(k), {})[k] = model[k]
                if k in dels.get(_kg(k), []):
                    dels[_kg(k)].remove(k)
        kgs = set(ups) | set(dels)
        chain.append(
            (
                epoch,
                "delta",
                {
                    kg: codec.encode_key_group_delta_raw(
                        ups.get(kg, {}), dels.get(kg, [])
                    )
                    for kg in kgs
                },
            )
        )
    return chain, model


def _kg(encoded: bytes) -> int:
    return encoded[-1] % G


def metas_of(chain: Chain) -> tuple[Manifest, list[ShardMeta], dict[str, bytes]]:
    """One shard per (epoch, half of the key groups), as the writer would pack them."""
    metas, payloads = [], {}
    for epoch, kind, blobs in chain:
        order = sorted(blobs)
        for seq, part in enumerate(
            (order[: len(order) // 2], order[len(order) // 2 :])
        ):
            if not part:
                continue
            data = codec.encode_shard(
                OWNER, epoch, kind, {kg: blobs[kg] for kg in part}
            )
            sid = f"{OWNER}@{epoch}#{seq}"
            import zlib

            metas.append(
                ShardMeta(
                    sid, OWNER, epoch, len(data), zlib.crc32(data), tuple(part), kind
                )
            )
            payloads[sid] = data
    manifest = Manifest(OWNER, chain[-1][0], G, tuple(m.shard_id for m in metas), 1)
    return manifest, metas, payloads


def flat_state(chain: Chain) -> dict[bytes, Any]:
    state: dict[bytes, Any] = {}
    for kg in range(G):
        blobs = [b[kg] for _, _, b in chain if kg in b]
        if blobs:
            state.update(
                codec.decode_key_group_raw(codec.merge_key_group_blobs(blobs)).entries
            )
    return state


def single_pieces(chain: Chain) -> list[Piece]:
    return [
        Piece(kg, e, e, blob) for e, _, blobs in chain for kg, blob in blobs.items()
    ]


def tree_merge(
    pieces: list[Piece], chains: ChainIndex, nodes: int, k: int, seed: int
) -> list[Piece]:
    """Scatter pieces over a k-ary heap of nodes, merge bottom-up like relay_tree."""
    rng = random.Random(seed)
    own: list[list[Piece]] = [[] for _ in range(nodes)]
    for p in pieces:
        own[rng.randrange(nodes)].append(p)

    def up(i: int) -> list[Piece]:
        gathered = list(own[i])
        for c in children_of(i, k, nodes):
            gathered += up(c)
        return merge_pieces(gathered, chains)

    return up(0)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    epochs=st.integers(1, 9),
    nodes=st.integers(1, 7),
    k=st.integers(2, 4),
)
def test_tree_merge_equals_flat_fold(
    seed: int, epochs: int, nodes: int, k: int
) -> None:
    chain, model = random_chain(seed, epochs)
    manifest, metas, payloads = metas_of(chain)
    chains = ChainIndex.of(metas)
    merged = tree_merge(single_pieces(chain), chains, nodes, k, seed)
    # every key group arrives as one piece spanning its whole chain
    assert sorted(p.kg for p in merged) == chains.key_groups
    for p in merged:
        assert (p.lo, p.hi) == (chains.epochs(p.kg)[0], chains.epochs(p.kg)[-1])
    assembly = Assembly(manifest, metas)
    for p in merged:
        assert assembly.add_piece(p)
    assert assembly.complete
    state = KeyedState(G)
    for layer in assembly.install_order():
        state.install(layer, lazy=True)
    got = {codec.encode_key(k): v for k, v in state.items()}
    assert got == model == flat_state(chain)


def test_merge_never_folds_across_a_gap() -> None:
    chain, _ = random_chain(3, 5)
    _, metas, _ = metas_of(chain)
    chains = ChainIndex.of(metas)
    kg = next(kg for kg in chains.key_groups if len(chains.epochs(kg)) >= 3)
    e = chains.epochs(kg)
    blobs = {ep: b[kg] for ep, _, b in chain if kg in b}
    out = merge_pieces(
        [Piece(kg, e[0], e[0], blobs[e[0]]), Piece(kg, e[2], e[2], blobs[e[2]])], chains
    )
    assert [(p.lo, p.hi) for p in out] == [(e[0], e[0]), (e[2], e[2])]
    with pytest.raises(RecoveryError):
        merge_pieces(
            [Piece(kg, e[0], e[1], b"x"), Piece(kg, e[1], e[1], blobs[e[1]])], chains
        )


def test_assembly_dedupes_reports_missing_and_checks_crc() -> None:
    chain, model = random_chain(11, 4)
    manifest, metas, payloads = metas_of(chain)
    assembly = Assembly(manifest, metas)
    first, *rest = metas
    assert (
        assembly.add_shard(first.shard_id, payloads[first.shard_id], crc_checked=False)
        > 0
    )
    assert (
        assembly.add_shard(first.shard_id, payloads[first.shard_id], crc_checked=False)
        == 0
    )
    assert assembly.duplicates == len(first.key_groups)
    assert assembly.missing_shards() == [m.shard_id for m in rest]
    corrupt = bytearray(payloads[rest[0].shard_id])
    corrupt[-1] ^= 1
    with pytest.raises(ChecksumError):
        assembly.add_shard(rest[0].shard_id, bytes(corrupt), crc_checked=False)
    for m in rest:
        assembly.add_shard(m.shard_id, payloads[m.shard_id], crc_checked=False)
    assert assembly.complete
    layers = assembly.layers()
    assert {codec.encode_key(k): v for k, v in _state(layers).items()} == model


def test_overlapping_piece_is_dropped_not_applied_twice() -> None:
    chain, _ = random_chain(5, 4)
    manifest, metas, _ = metas_of(chain)
    chains = ChainIndex.of(metas)
    kg = next(kg for kg in chains.key_groups if len(chains.epochs(kg)) >= 3)
    e = chains.epochs(kg)
    blobs = {ep: b[kg] for ep, _, b in chain if kg in b}
    assembly = Assembly(manifest, metas)
    merged = merge_pieces([Piece(kg, x, x, blobs[x]) for x in e[:2]], chains)[0]
    assert assembly.add_piece(merged)
    assert not assembly.add_piece(Piece(kg, e[1], e[1], blobs[e[1]]))  # duplicate
    assert not assembly.add_piece(
        merge_pieces([Piece(kg, x, x, blobs[x]) for x in e[1:3]], chains)[0]
    )  # partial overlap
    assert assembly.conflicts == 1 and assembly.duplicates == 1
    with pytest.raises(RecoveryError):
        assembly.add_piece(Piece(kg, 99, 99, b""))


def _state(layers: dict[int, list[Any]]) -> dict[tuple[Any, ...], Any]:
    state = KeyedState(G)
    depth = max(len(v) for v in layers.values())
    for i in range(depth):
        state.install({kg: b[i] for kg, b in layers.items() if len(b) > i}, lazy=False)
    return dict(state.items())


def test_chain_index_round_trips_the_wire_and_rejects_double_claims() -> None:
    chain, _ = random_chain(2, 3)
    _, metas, _ = metas_of(chain)
    chains = ChainIndex.of(metas)
    again = ChainIndex.from_wire(chains.to_wire())
    assert again.key_groups == chains.key_groups
    assert all(again.epochs(kg) == chains.epochs(kg) for kg in chains.key_groups)
    with pytest.raises(RecoveryError):
        ChainIndex([("a", 1, [0]), ("b", 1, [0])])


def test_assembly_hands_over_each_key_group_once_when_it_is_whole() -> None:
    chain, _ = random_chain(5, 4)
    manifest, metas, payloads = metas_of(chain)
    whole: list[tuple[int, list[Any]]] = []
    assembly = Assembly(
        manifest, metas, on_key_group=lambda kg, blobs: whole.append((kg, blobs))
    )
    for meta in metas:
        assembly.add_shard(meta.shard_id, payloads[meta.shard_id], crc_checked=False)
        assembly.add_shard(meta.shard_id, payloads[meta.shard_id], crc_checked=False)
    layers = assembly.layers()
    assert sorted(kg for kg, _ in whole) == sorted(layers)
    assert dict(whole) == layers
