"""The lab's lock: a second holder waits up to a deadline, then names the first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sr3_cli.lockfile import LockTimeoutError, exclusive


class FakeClock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_lock_held_too_long_names_the_file_and_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "lab.lock"
    clock = FakeClock()
    with exclusive(path, timeout_s=1.0):
        # flock locks belong to an open file: a second open conflicts, as
        # another process's would
        with (
            pytest.raises(LockTimeoutError) as raised,
            exclusive(path, timeout_s=30.0, clock=clock, sleep=clock.sleep),
        ):
            pytest.fail("locked twice")
    assert clock.now >= 30.0
    message = str(raised.value)
    assert f"{path} is still locked after 30 s by pid {os.getpid()}" in message
    assert "wait for that command to finish and try again" in message
    assert raised.value.retriable


def test_a_released_lock_is_taken_at_once_and_names_no_holder(tmp_path: Path) -> None:
    path = tmp_path / "lab.lock"
    with exclusive(path, timeout_s=1.0):
        assert path.read_text(encoding="utf-8") == f"{os.getpid()}\n"
    assert path.read_text(encoding="utf-8") == ""
    clock = FakeClock()
    with exclusive(path, timeout_s=0.0, clock=clock, sleep=clock.sleep):
        pass
    assert clock.now == 0.0
