"""Which Spark query failures a run starts again, and how often.

No Spark session: the run's collaborators are mocks, and ``launch`` is replaced
by a counter; the rule under test is :meth:`RunQueries.retry_start`'s.
"""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock

import pytest

from spark_bridge.run_queries import START_RETRIES, RunQueries

SLOW = (
    "[PYTHON_EXCEPTION] ... org.apache.spark.SparkException: Python worker "
    "failed to connect back.\n\tat org.apache.spark.api.python..."
)
TIMED_OUT = (
    "java.net.SocketTimeoutException: Timed out while waiting for the Python "
    "worker to connect back"
)


def run_queries(committed: int = 0) -> tuple[RunQueries, list[Path]]:
    sink = MagicMock()
    sink.committed = committed
    run = RunQueries(
        path="t.py",
        environment=None,
        session=MagicMock(),
        own_session=True,
        overrides={},
        ring=None,
        root=Path("/r"),
        max_rows_per_batch=10,
        sink=sink,
        plan=MagicMock(),
        start=MagicMock(),
        start_root=Path("/r"),
    )
    launched: list[Path] = []

    def launch(start_root: Path) -> object:
        launched.append(start_root)
        run.committed_at_launch = run.sink.committed
        return object()

    run.launch = launch  # type: ignore[method-assign]  # no Spark: count launches
    return run, launched


@pytest.mark.parametrize("text", [SLOW, TIMED_OUT])
def test_a_worker_that_did_not_connect_back_before_any_batch_is_started_again(
    text: str,
) -> None:
    run, launched = run_queries()
    assert run.retry_start(RuntimeError(text))
    assert launched == [Path("/r")]
    assert len(run.start_retries) == 1
    assert "connect back" in run.start_retries[0]


def test_retries_stop_after_the_limit() -> None:
    run, launched = run_queries()
    for _ in range(START_RETRIES):
        assert run.retry_start(RuntimeError(SLOW))
    assert not run.retry_start(RuntimeError(SLOW))
    assert len(launched) == START_RETRIES


def test_a_failure_after_a_committed_batch_is_the_runs() -> None:
    run, launched = run_queries()
    run.sink.committed = 2  # the query committed two batches, then failed
    assert not run.retry_start(RuntimeError(SLOW))
    assert launched == []


def test_any_other_failure_is_the_runs() -> None:
    run, launched = run_queries()
    assert not run.retry_start(RuntimeError("ZeroDivisionError in bolt count"))
    assert launched == []
