"""Every bench under bench/ imports: a name moved elsewhere breaks it here first.

Benches are not run by the suite (they measure, on a quiet machine), so a
refactoring that moves a function they import would otherwise go unnoticed
until someone runs one.
"""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import REPO_ROOT

BENCHES = sorted(p.stem for p in (REPO_ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")

    assert module.__doc__, f"bench/{name}.py: no docstring saying what it measures"
