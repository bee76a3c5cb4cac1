"""The ``foreachBatch`` sink: a run stops after exactly ``--max-batches`` commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_bridge.errors import BatchLimitError
from spark_bridge.sink import BatchSink


def test_a_batch_past_the_limit_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    sink = BatchSink(tmp_path, None, frozenset({"lines"}), limit=1)
    sink.committed = 1  # the run's one batch is in
    # the frame is never touched: nothing written, nothing committed
    with pytest.raises(BatchLimitError, match=r"micro-batch 7 not run.*--max-batches"):
        sink(None, 7)  # type: ignore[arg-type]  # no DataFrame: refused first
    assert list(tmp_path.iterdir()) == []
    assert sink.committed == 1
