"""Shared fixtures: ONE local[2] Spark session per test session, and ``wait_until``.

``PYSPARK_PYTHON`` is this interpreter and the repository root is on
``PYTHONPATH`` before the JVM starts, so Python workers import ``spark_bridge``
and the venv's pandas. Tests must not stop the session.

``make test`` runs the suite on two xdist workers (``--dist loadgroup``;
``TEST_WORKERS=1`` runs it serially). Tests of a shared JVM service are kept
in one group, ``jvm``, run on one worker, one test at a time: the Apache Storm
cluster, the ``sparse`` jar build in the repository's ``_build/``, the
network-namespace lab (whose namespaces and bridge have machine-wide names),
the ``local[2]`` Spark session and the standalone cluster. Each service starts
once, on that worker; the other worker runs the rest meanwhile.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

import pytest
from hypothesis import settings
from pyspark.sql import SparkSession

from spark_bridge.kafka_jars import spark_kafka_jars
from sr3.jvm import LAB_JVM_FLAGS

REPO_ROOT = Path(__file__).resolve().parents[1]

# The suite's Spark JVMs start with the flags of every other JVM a lab starts:
# the shared session's and each `sr3 run --engine spark` driver
# (SPARK_SUBMIT_OPTS), a standalone cluster's master and workers
# (SPARK_DAEMON_JAVA_OPTS). Tests run short queries on small data, where the C2
# compiler and parallel GC threads cost more CPU than they give back:
# test_spark_engine and test_dag took 260 CPU-s with them on the session
# against 355 and 338 without. Users' Spark keeps Spark's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", " ".join(LAB_JVM_FLAGS))
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", " ".join(LAB_JVM_FLAGS))
T = TypeVar("T")
WaitUntil = Callable[..., Any]


def run_sr3(
    *args: str,
    lab_root: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 240,
) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS`` as a user would; check it printed no traceback.

    No ``SR3_*`` variable of this process passes on; ``lab_root`` sets
    ``SR3_LAB`` (the command then targets that lab), ``env`` adds others.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SR3_")}
    if lab_root is not None:
        environ["SR3_LAB"] = str(lab_root)
    environ.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout_s,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def load_module(path: Path, name: str) -> ModuleType:
    """Import the Python file ``path`` as a fresh module named ``name``.

    Not put in ``sys.modules``: a test reads a topology's parts (its corpus,
    its expected results) without the import a task of the topology does.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wait_until(
    predicate: Callable[[], T], *, timeout_s: float = 10.0, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)  # the polling interval, bounded by timeout_s


@pytest.fixture
def wait_until() -> WaitUntil:
    """Return ``wait_until(predicate, *, timeout_s=10, what=...)``: the one poller."""
    return _wait_until


# Hypothesis's per-example deadline is a timing assertion: on a shared, loaded
# machine it fails tests that are correct. Examples are bounded by count only.
settings.register_profile("sr3", deadline=None)
settings.load_profile("sr3")

#: The xdist groups, first match wins: (group, markers, fixtures). Every test
#: of a shared JVM service runs on the ``jvm`` group's worker, one at a time:
#: the Storm cluster (one ``_build/`` at a time), the netns lab (one set of
#: namespace names), the Spark session and the standalone cluster each start
#: once, and never beside each other (run at once, the two services stretched
#: each test 3.55x on two cores). The tests of the session's Kafka broker are
#: one ``kafka`` unit, so the other worker starts at most one more broker.
_GROUPS: Final = (
    (
        "jvm",
        frozenset({"apache_storm", "netns", "spark"}),
        frozenset(
            {"apache_storm", "storm_cluster_factory", "spark", "standalone_session"}
        ),
    ),
    ("kafka", frozenset(), frozenset({"kafka_broker"})),
)


def _group_of(item: pytest.Item) -> str | None:
    """Return the xdist group ``item`` belongs to, or None (any worker)."""
    marked = {m.name for m in item.iter_markers()}
    fixtures = set(getattr(item, "fixturenames", ()))
    for group, markers, needs in _GROUPS:
        if marked & markers or fixtures & needs:
            return group
    return None


#: Seconds spent per test module (setup, call and teardown), for the summary.
_MODULE_SECONDS: dict[str, float] = {}
_SLOWEST_MODULES: Final = 25


#: A file each test's phases are appended to as they end (``SR3_TEST_TIMES``):
#: where the time went, even in a run stopped before its summary.
_TIMES_FILE: Final = os.environ.get("SR3_TEST_TIMES", "")
#: The machine's busy CPU seconds when the last phase ended (SR3_TEST_TIMES).
_BUSY_AT: list[float] = []


def _busy_cpu_s() -> float:
    """Every core's busy time since boot, in seconds (``/proc/stat``), or 0."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its module's total (and to SR3_TEST_TIMES).

    SR3_TEST_TIMES also gets the machine's busy CPU seconds since the previous
    phase ended: on a machine running nothing else, what the phase cost in CPU
    (its JVMs, ring nodes and task processes included), which bounds what
    parallel workers can gain on few cores.
    """
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration
    if _TIMES_FILE:
        busy = _busy_cpu_s()
        cpu = busy - _BUSY_AT[0] if _BUSY_AT else 0.0
        _BUSY_AT[:] = [busy]
        with open(_TIMES_FILE, "a", encoding="utf-8") as out:
            out.write(
                f"{time.strftime('%H:%M:%S')}\t{report.when}\t{report.outcome}\t"
                f"{report.duration:.1f}\t{report.nodeid}\t{cpu:.1f}\n"
            )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the slowest modules: where the suite's time budget goes."""
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    terminalreporter.section(f"slowest {_SLOWEST_MODULES} modules")
    ranked = sorted(_MODULE_SECONDS.items(), key=lambda kv: kv[1], reverse=True)
    for module, seconds in ranked[:_SLOWEST_MODULES]:
        terminalreporter.write_line(
            f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {module}"
        )
    terminalreporter.write_line(f"{total:8.1f}s in all {len(ranked)} modules")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Put every test of a shared JVM service in its ``--dist loadgroup`` group.

    pytest-xdist 3.8 names a test's group by setting ``item._nodeid`` to
    ``<nodeid>@<group>``, which pytest 9 no longer reads (its ``nodeid`` comes
    from ``_id``): every group was ignored and two workers started Storm
    clusters and Spark sessions at once. So the suffix is set here, where
    pytest 9 reads it (both pinned in setup.cfg).
    """
    loadgroup = bool(getattr(config.option, "loadgroup", False))  # set on workers
    for item in items:
        group = _group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup and "@" not in item.nodeid:
                item._id = f"{item.nodeid}@{group}"  # type: ignore[assignment]  # noqa: SLF001


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """Return the shared ``local[2]`` session (2 shuffle partitions, no UI)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sr3-spark-bridge-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Spark's Kafka source (scripts/fetch-jars.sh spark-kafka): Spark reads
        # its classpath once, so the shared session carries it for the Kafka tests
        .config("spark.jars", ",".join(str(j) for j in spark_kafka_jars()))
        .getOrCreate()
    )
    yield session
    session.stop()
