"""Trees and runs of bench/backend_before_after.py: the baseline worktree, one run.

The "before" tree is a detached git worktree under ``.cache/bench-before/``; a
run uses this interpreter with ``PYTHONPATH`` and the working directory set to
its tree, drops the options that tree's benchmark does not know, and puts the
tree's ``bench/results/`` back as it found them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.before_after_benches import Bench

ROOT = Path(__file__).resolve().parents[1]
BEFORE_DIR = (ROOT / ".cache").resolve() / "bench-before"
RUN_TIMEOUT_S = 1200


def git(*args: str, cwd: Path = ROOT) -> str:
    """Run ``git args`` in ``cwd``; its stdout, stripped."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def before_tree(rev: str) -> tuple[Path, str]:
    """The baseline worktree at ``rev`` (added, or moved there); its commit."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if (BEFORE_DIR / ".git").exists():
        if git("rev-parse", "HEAD", cwd=BEFORE_DIR) != commit:
            git("checkout", "--detach", "--quiet", commit, cwd=BEFORE_DIR)
    else:
        BEFORE_DIR.parent.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", str(BEFORE_DIR), commit)
    return BEFORE_DIR, commit


def known_options(tree: Path, script: str) -> set[str]:
    """The ``--options`` a tree's version of ``script`` accepts."""
    out = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", out))


def adapt(options: tuple[str, ...], known: set[str]) -> tuple[list[str], list[str]]:
    """``options`` without the flags (and their values) not in ``known``."""
    kept: list[str] = []
    dropped: list[str] = []
    for i, item in enumerate(options):
        if item.startswith("--"):
            (kept if item in known else dropped).append(item)
        elif options[i - 1] in known:
            kept.append(item)
    return kept, dropped


def _snapshot(results: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in results.glob("*") if p.is_file()}


def _put_back(results: Path, saved: dict[Path, bytes]) -> None:
    """Leave ``results`` as ``saved`` found it (a run rewrites its files)."""
    for path in results.glob("*"):
        if path.is_file() and path not in saved:
            path.unlink()
    for path, data in saved.items():
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)


def run_once(bench: Bench, tree: Path, options: list[str]) -> dict[str, Any]:
    """Run one benchmark in ``tree``; return its metrics, seconds and load."""
    results = tree / "bench" / "results"
    saved = _snapshot(results)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, bench.script, *options],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
            check=False,
            timeout=RUN_TIMEOUT_S,
        )
        if proc.returncode != 0:
            tail = proc.stderr[-2000:]
            msg = f"{bench.script} in {tree} exited {proc.returncode}: {tail}"
            raise RuntimeError(msg)
        metrics = bench.read(tree, proc.stdout)
    finally:
        _put_back(results, saved)
    return {
        "metrics": metrics,
        "seconds": round(time.monotonic() - started, 1),
        "load_1m_after": os.getloadavg()[0],
    }
