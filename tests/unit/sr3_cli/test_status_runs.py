"""``sr3 status`` shows what each running task owns: key-group ranges or the hash."""

from __future__ import annotations

from typing import Any

import pytest

from sr3_cli.status import _print_runs


def task(index: int, of: int, **extra: Any) -> dict[str, Any]:
    return {
        "task": 3 + index,
        "index": index,
        "of": of,
        "owner": f"wc/count/{index}",
        "state": "running",
        "processed": 10,
        "held": False,
        **extra,
    }


def run(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wc": {
            "pid": 42,
            "components": {"count": {"tasks": len(tasks), "max": 256}},
            "ownership": {"count": tasks},
            "rebalance": None,
        }
    }


def test_key_group_routed_tasks_show_their_ranges(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _print_runs(run([task(0, 2, key_groups="0-63,128-191"), task(1, 2, key_groups="")]))
    out = capsys.readouterr().out
    assert (
        "index 0/2 owner wc/count/0 (running, 10 processed): key groups 0-63,128-191"
        in out
    )
    assert "key groups none" in out


def test_fields_routed_tasks_show_the_hash(capsys: pytest.CaptureFixture[str]) -> None:
    _print_runs(run([task(1, 2)]))
    assert "keys whose fields hash mod 2 == 1" in capsys.readouterr().out
