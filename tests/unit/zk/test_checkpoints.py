"""Commit records: the key-group tables they carry, and records without them."""

from __future__ import annotations

import pytest

from sr3.codec import pack_meta, unpack_meta
from sr3.errors import CodecError
from sr3.keygroups import decode_table, encode_table, range_table
from zk.checkpoints import CommitRecord


def test_a_record_carries_each_components_table_compactly() -> None:
    table = range_table(3, 256)
    table[5] = 2  # one key group moved
    record = CommitRecord(
        epoch=7,
        offsets={"lines/0": 12},
        owners=("t/count/0", "t/count/1", "t/count/2"),
        key_groups={"count": encode_table(table)},
    )
    raw = unpack_meta(pack_meta(record.to_dict()))
    back = CommitRecord.from_dict(raw)
    assert back == record
    assert decode_table(back.key_groups["count"], 256) == table
    # runs, not 256 entries: 0..4, the moved one, the rest of 0, then 1 and 2
    assert len(raw["key_groups"]["count"]) == 5


def test_a_record_without_tables_is_written_and_read_as_before() -> None:
    record = CommitRecord(epoch=3, owners=("t/count/0",))
    assert "key_groups" not in record.to_dict()
    old = {"epoch": 3, "offsets": {}, "owners": ["t/count/0"], "committed_at": 0.0}
    assert CommitRecord.from_dict(old).key_groups == {}


def test_a_malformed_table_is_refused() -> None:
    with pytest.raises(CodecError, match="malformed commit record"):
        CommitRecord.from_dict({"epoch": 1, "key_groups": {"count": [[0]]}})
