"""``sr3 rebalance`` refuses bad command lines before it contacts anything.

These run the real ``main(argv)`` against a ZooKeeper address nothing listens
on: each case fails before any connection is tried.
"""

from __future__ import annotations

import pytest

from sr3_cli.main import main

CLOSED_ZK = ["--zk", "127.0.0.1:1"]


@pytest.fixture(autouse=True)
def _no_ambient_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SR3_LAB", "SR3_ZK_HOSTS", "SR3_NODE_SECRET"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["wc"], "nothing to rebalance: name at least one -e COMPONENT=N"),
        (["wc", "-e", "count"], "write COMPONENT=N"),
        (["wc", "-e", "count=x"], "is not a task count"),
        (["wc", "-e", "count=2", "-e", "count=3"], "named twice"),
        (["wc", "-e", "count=2", "-n", "3"], "-n (workers) does not apply"),
        (["wc", "-e", "count=2", "-w", "-1"], "must be >= 0 seconds"),
    ],
)
def test_bad_rebalance_requests_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code = main(["rebalance", *argv, *CLOSED_ZK])
    out, err = capsys.readouterr()
    assert code == 2
    assert says in err
    assert "Traceback" not in out + err
