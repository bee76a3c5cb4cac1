"""A Spark query whose Python source worker starts too slowly is started again.

Spark gives the Python worker behind a Python data source ten seconds to
connect back, hard-coded. On a loaded machine its interpreter can take longer,
and the query then fails before reading anything. ``sr3 run --engine spark``
starts the same query again (``spark_bridge.run_queries.RunQueries.retry_start``)
and says so in the report. Here the worker's interpreter really is that slow:
``PYSPARK_PYTHON`` is a wrapper that sleeps past Spark's bound the first time it
starts the streaming source runner, then runs this interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from topology_api.topology import load_topology

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]
WORDCOUNT = REPO_ROOT / "topologies" / "wordcount.py"
LINES = 300
#: longer than Spark's ten seconds for a Python worker to connect back
SLOW_S = 13
_WRAPPER = """#!/bin/sh
case "$*" in
  *python_streaming_source_runner*)
    if [ ! -e "{marker}" ]; then
      : > "{marker}"
      sleep {slow}
    fi
    ;;
esac
exec "{python}" "$@"
"""


def _counts(lines: int) -> dict[str, int]:
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    return dict(Counter(w for line in module.corpus(lines, 8, 7) for w in line.split()))


@pytest.mark.timeout(300)
def test_a_source_worker_too_slow_to_connect_back_is_started_again(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "slowed-once"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        _WRAPPER.format(marker=marker, slow=SLOW_S, python=sys.executable),
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    env = dict(os.environ, PYSPARK_PYTHON=str(wrapper), SPARK_LOCAL_IP="127.0.0.1")
    args = [sys.executable, "-m", "sr3_cli", "run", str(WORDCOUNT)]
    args += ["--engine", "spark", "--until-idle", "--json"]
    args += ["--checkpoint-dir", str(tmp_path / "ck")]
    args += ["-o", f"wordcount.lines={LINES}"]
    proc = subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.exists(), "the wrapper never started the streaming source runner"
    report = json.loads(proc.stdout)
    retries = report["start_retries"]
    assert len(retries) == 1, retries
    assert "connect back" in retries[0]
    assert "starting it again (1 of 3)" in proc.stderr
    counts = {w: n for w, n in report["outputs"]["count"].values()}
    assert counts == _counts(LINES)
