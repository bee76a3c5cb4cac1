"""ZkPaths builds every znode path; names are quoted into one reversible segment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sr3.errors import CoordinationError
from sr3.manifest import shard_id_for
from zk.paths import ZkPaths, quote_name, unquote_name

PATHS = ZkPaths("/sr3/default")


def test_layout() -> None:
    owner = "wordcount/counter/3"
    sid = shard_id_for(owner, 7, 0)
    assert PATHS.members == "/members"
    assert PATHS.member("node-1") == "/members/node-1"
    assert PATHS.election == "/election"
    assert PATHS.contender() == "/election/c-"
    assert PATHS.owner(owner) == "/owners/wordcount%2Fcounter%2F3"
    assert PATHS.epochs(owner) == "/owners/wordcount%2Fcounter%2F3/epochs"
    assert PATHS.epoch(owner, 7) == "/owners/wordcount%2Fcounter%2F3/epochs/0000000007"
    assert PATHS.shards(owner) == "/owners/wordcount%2Fcounter%2F3/shards"
    assert PATHS.shard(owner, sid) == (
        "/owners/wordcount%2Fcounter%2F3/shards/wordcount%2Fcounter%2F3%407%230"
    )
    assert PATHS.topology("word count") == "/topologies/word%20count"
    assert PATHS.ring_meta == "/ring/meta"


def test_absolute_prefixes_the_chroot() -> None:
    assert PATHS.absolute("/members/n1") == "/sr3/default/members/n1"
    assert PATHS.absolute("/") == "/sr3/default"
    assert ZkPaths("/").absolute("/members") == "/members"


@pytest.mark.parametrize("chroot", ["", "sr3", "/sr3/"])
def test_bad_chroot(chroot: str) -> None:
    with pytest.raises(CoordinationError, match="sr3.zk.chroot"):
        ZkPaths(chroot)


def test_epochs_sort_as_text_and_parse_back() -> None:
    names = [PATHS.epoch("o", e).rpartition("/")[2] for e in (10, 9, 100, 0)]
    assert sorted(names) == [names[3], names[1], names[0], names[2]]
    assert [ZkPaths.epoch_of(n) for n in names] == [10, 9, 100, 0]


@pytest.mark.parametrize("epoch", [-1, 10**10])
def test_epoch_out_of_range(epoch: int) -> None:
    with pytest.raises(CoordinationError, match="outside") as info:
        PATHS.epoch("o", epoch)
    assert info.value.retriable is False


@pytest.mark.parametrize("segment", ["12", "000000001x", "abcdefghij"])
def test_epoch_of_rejects_foreign_names(segment: str) -> None:
    with pytest.raises(CoordinationError):
        ZkPaths.epoch_of(segment)


def test_sequence_of() -> None:
    assert ZkPaths.sequence_of("c-0000000042") == 42
    for bad in ("x-0000000001", "c-", "c-12a"):
        with pytest.raises(CoordinationError):
            ZkPaths.sequence_of(bad)


@pytest.mark.parametrize(
    ("name", "segment"),
    [(".", "%2E"), ("..", "%2E%2E"), ("a.b", "a.b"), ("x/y@1#2", "x%2Fy%401%232")],
)
def test_reserved_and_special_names(name: str, segment: str) -> None:
    assert quote_name(name) == segment
    assert unquote_name(segment) == name


def test_empty_name_is_refused() -> None:
    with pytest.raises(CoordinationError, match="empty") as info:
        PATHS.member("")
    assert info.value.retriable is False


@given(st.text(min_size=1))
def test_quote_round_trips_into_one_valid_segment(name: str) -> None:
    segment = quote_name(name)
    assert unquote_name(segment) == name
    assert "/" not in segment
    assert segment not in ("", ".", "..")
    assert segment.isascii() and segment.isprintable()


@given(st.text(min_size=1), st.text(min_size=1))
def test_quote_is_injective(a: str, b: str) -> None:
    assert (quote_name(a) == quote_name(b)) == (a == b)
