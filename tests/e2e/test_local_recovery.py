"""Task-scope recovery on the local cluster (``sr3.recovery.scope``), end to end.

Every run is compared with a failure-free run of the same topology: the
committed final state must be identical, and so must the sink outputs. Under
``scope=task`` a sink that was not itself killed gets every tuple exactly once
(the same multiset of lines as the failure-free run: no duplicate, no loss);
under ``scope=global`` a rollback replays into the sinks, so there the last
count per word (word count) and the set of pairs (join) are compared.
Kill schedules are drawn from a seeded RNG: single kills, a second kill of the
same task during its replay, and an upstream task killed with its downstream.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sr3_cli.lab import Lab
from tests.conftest import load_module
from tests.e2e.conftest import require_zk, sr3_json
from tests.integration.conftest import running_lab

pytestmark = [pytest.mark.zk, pytest.mark.storm, pytest.mark.slow]

TOPOLOGIES = Path(__file__).parent / "topologies"
WORDCOUNT = TOPOLOGIES / "exact_wc.py"
JOIN = TOPOLOGIES / "join_merge.py"
LINES = 1500
ROWS = 400
#: Spouts pace their emits, so the stream lasts a few seconds and each kill
#: (1.5 to 3.5 s after the tasks were spawned, on a quiet machine) lands
#: mid-stream. On a loaded one tasks start later and the stream lasts longer: kill
#: times stretch by the failure-free run's length over its quiet length
#: (:func:`stretch`), or a kill lands before the task forwarded anything.
QUIET = ("-o", "sr3.idle.quiet.s=0.5", "-o", "sr3.checkpoint.interval.s=0.5")
PACE = ("-o", "exact.pause.s=0.004", "-o", "join.pause.s=0.008")
#: Seconds the failure-free runs take on a quiet machine (``seconds`` of the
#: report; 7.2 to 7.5 s and 4.8 to 5.0 s measured 2026-11-27).
QUIET_SPAN_S = {"exact_wc": 7.5, "join_merge": 5.0}


def _module(name: str) -> Any:
    module = load_module(TOPOLOGIES / f"{name}.py", f"{name}_for_local_recovery")
    return module


_EXACT = _module("exact_parts")
_JOIN = _module("join_parts")
TRUE_COUNTS = dict(Counter(w for line in _EXACT.corpus(LINES) for w in line.split()))


def _true_pairs() -> Counter[tuple[str, str, str]]:
    left, right = _JOIN.side("left", ROWS), _JOIN.side("right", ROWS)
    return Counter(
        (k, str(lv), str(rv)) for k, lv in left for k2, rv in right if k == k2
    )


TRUE_PAIRS = _true_pairs()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab (ZooKeeper + 3 ring nodes) for the module: runs are sequential."""
    require_zk()
    with running_lab(tmp_path_factory.mktemp("local-lab") / "lab", 3) as running:
        yield running


def run_wc(lab: Lab, out: Path, *extra: str) -> Any:
    out.mkdir(parents=True, exist_ok=True)
    report = sr3_json(
        lab, "run", str(WORDCOUNT), "--until-idle", "--timeout", "150",
        "-o", f"exact.lines={LINES}", "-o", f"exact.out={out}", *QUIET, *PACE, *extra,
    )  # fmt: skip
    assert report["idle"], report
    return report


def run_join(lab: Lab, out: Path, *extra: str) -> Any:
    out.mkdir(parents=True, exist_ok=True)
    report = sr3_json(
        lab, "run", str(JOIN), "--until-idle", "--timeout", "150",
        "-o", f"join.rows={ROWS}", "-o", f"join.out={out}", *QUIET, *PACE, *extra,
    )  # fmt: skip
    assert report["idle"], report
    return report


def sink_lines(out: Path) -> Counter[tuple[str, ...]]:
    lines: Counter[tuple[str, ...]] = Counter()
    for path in sorted(out.glob("sink-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            lines[tuple(line.split("\t"))] += 1
    return lines


def last_counts(out: Path) -> dict[str, int]:
    last: dict[str, int] = {}
    for path in sorted(out.glob("sink-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, count = line.partition("\t")
            last[word] = int(count)
    return last


def dump(lab: Lab, topology: str, component: str) -> Any:
    return sr3_json(
        lab, "state", "dump", "--topology", topology, "--component", component
    )


def join_state(lab: Lab) -> dict[str, dict[str, list[int]]]:
    """The join's committed state, each side's rows sorted.

    The order in which a key's rows were appended is the order the join merged
    its input channels, which differs between two failure-free runs too; the
    rows themselves, duplicates included, must not.
    """
    state = dump(lab, "join_merge", "join")
    return {
        key: {side: sorted(rows) for side, rows in sides.items()}
        for key, sides in state.items()
    }


@dataclass(frozen=True)
class Baseline:
    """A failure-free run: its committed state, sink lines and how long it took."""

    state: Any
    lines: Counter[tuple[str, ...]]
    factor: float

    def at(self, nominal_s: float) -> str:
        """``nominal_s`` (a kill time on a quiet machine) at this machine's pace."""
        return f"{nominal_s * self.factor:.2f}"


def stretch(report: Any) -> float:
    """How much slower than on a quiet machine the failure-free run was (>= 1)."""
    return max(1.0, float(report["seconds"]) / QUIET_SPAN_S[report["topology"]])


@pytest.fixture(scope="module")
def wc_baseline(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    out = tmp_path_factory.mktemp("wc-baseline")
    report = run_wc(lab, out)
    assert report["recoveries"] == []
    assert last_counts(out) == TRUE_COUNTS
    return Baseline(dump(lab, "exact_wc", "count"), sink_lines(out), stretch(report))


@pytest.fixture(scope="module")
def join_baseline(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("join-baseline")
    report = run_join(lab, out)
    assert report["recoveries"] == []
    assert sink_lines(out) == TRUE_PAIRS
    return Baseline(join_state(lab), sink_lines(out), stretch(report))


def schedule(
    rng: random.Random, kind: str, tasks: list[str], baseline: Baseline
) -> list[str]:
    """A seeded kill schedule of ``kind``, at ``baseline``'s pace.

    ``single``: one task; ``again``: the first task of ``tasks`` (stateful)
    killed again during its replay; ``together``: an upstream task killed
    with its downstream stateful task.
    """
    at = rng.uniform(1.5, 3.5)
    first = rng.choice(tasks)
    kills = [f"{first}@{baseline.at(at)}"]
    if kind == "again":
        kills.append(f"{first}@{baseline.at(at + rng.uniform(0.05, 0.3))}")
    elif kind == "together":
        other = rng.choice([t for t in tasks if t.split(":")[0] != first.split(":")[0]])
        kills.append(f"{other}@{baseline.at(at)}")
    return [arg for kill in kills for arg in ("--kill", kill)]


def check_scope(report: Any, scope: str) -> None:
    assert report["recoveries"], "the kill caused no recovery"
    for recovery in report["recoveries"]:
        assert recovery["scope"] == scope, recovery
        assert recovery["reason"], recovery
        if scope == "task":
            # only the failed tasks restored, and each stateful one did
            causes = {c.strip() for c in recovery["cause"].split(",")}
            stateful = {c for c in causes if c.split(":")[0] in ("count", "join")}
            assert set(recovery["restored_tasks"]) == stateful, recovery


WC_TASKS = ["count:0", "count:1", "count:2", "split:0", "split:1", "lines:0", "lines:1"]
JOIN_TASKS = ["join:0", "join:1", "tag:0", "tag:1", "left:0", "left:1", "right:0"]
#: (seed, kind): every kind at least once, stateful tasks and spouts among them.
#: Word count's schedules: count:1; lines:1 twice; lines:1 with count:0; split:1.
#: (Seed 4, lines:1 with count:0 again at another moment, added no case.)
CASES = [
    (0, "single"),
    (1, "again"),
    (2, "together"),
    # another single failure, at another moment: `make test-soak`
    pytest.param(3, "single", marks=pytest.mark.soak),
]


def _stateful_first(tasks: list[str], stateful: str, seed: int) -> list[str]:
    """Even seeds start with a stateful task, odd ones with any task."""
    return [t for t in tasks if t.startswith(stateful)] if seed % 2 == 0 else tasks


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_wordcount_task_scope_is_exact(
    lab: Lab, wc_baseline: Baseline, tmp_path: Path, seed: int, kind: str
) -> None:
    rng = random.Random(seed)
    first = _stateful_first(WC_TASKS, "count", seed)
    tasks = first if kind != "together" else WC_TASKS
    kills = schedule(rng, kind, tasks, wc_baseline)
    report = run_wc(lab, tmp_path, *kills)
    check_scope(report, "task")
    assert dump(lab, "exact_wc", "count") == wc_baseline.state
    # no sink was killed: every count reached the sinks exactly once
    assert sink_lines(tmp_path) == wc_baseline.lines
    # the failed tasks' re-emits were matched with what they had forwarded
    # (a kill just after a commit, as when a loaded machine ran the baseline
    # slower than this run, leaves nothing forwarded to match)
    to_match = sum(r["outputs_to_match"] for r in report["recoveries"])
    suppressed = report["checkpoints"]["local_recovery"]["suppressed"]
    assert (suppressed > 0) == (to_match > 0), (suppressed, report["recoveries"])


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_join_task_scope_is_exact(
    lab: Lab, join_baseline: Baseline, tmp_path: Path, seed: int, kind: str
) -> None:
    rng = random.Random(100 + seed)
    first = _stateful_first(JOIN_TASKS, "join", seed)
    tasks = first if kind != "together" else JOIN_TASKS
    kills = schedule(rng, kind, tasks, join_baseline)
    report = run_join(lab, tmp_path, *kills)
    check_scope(report, "task")
    assert join_state(lab) == join_baseline.state
    assert sink_lines(tmp_path) == TRUE_PAIRS


def test_wordcount_global_scope_still_exact(
    lab: Lab, wc_baseline: Baseline, tmp_path: Path
) -> None:
    kills = schedule(random.Random(7), "together", WC_TASKS, wc_baseline)
    report = run_wc(lab, tmp_path, "-o", "sr3.recovery.scope=global", *kills)
    check_scope(report, "global")
    assert report["recoveries"][0]["reason"] == "sr3.recovery.scope is global"
    assert dump(lab, "exact_wc", "count") == wc_baseline.state
    assert last_counts(tmp_path) == TRUE_COUNTS


def test_join_global_scope_still_exact(
    lab: Lab, join_baseline: Baseline, tmp_path: Path
) -> None:
    kills = schedule(random.Random(8), "again", ["join:0", "join:1"], join_baseline)
    report = run_join(lab, tmp_path, "-o", "sr3.recovery.scope=global", *kills)
    check_scope(report, "global")
    assert join_state(lab) == join_baseline.state
    assert set(sink_lines(tmp_path)) == set(TRUE_PAIRS)


def test_a_plain_sink_failure_is_recovered_alone(
    lab: Lab, wc_baseline: Baseline, tmp_path: Path
) -> None:
    report = run_wc(lab, tmp_path, "--kill", f"sink:1@{wc_baseline.at(2.5)}")
    check_scope(report, "task")
    assert report["recoveries"][0]["restored_tasks"] == []
    assert dump(lab, "exact_wc", "count") == wc_baseline.state
    assert last_counts(tmp_path) == TRUE_COUNTS


def test_a_small_buffer_backpressures_without_loss_or_duplicates(
    lab: Lab, wc_baseline: Baseline, tmp_path: Path
) -> None:
    report = run_wc(
        lab, tmp_path, "-o", "sr3.recovery.buffer.bytes=4096",
        "-o", "sr3.checkpoint.interval.s=5", "--kill", f"count:1@{wc_baseline.at(2.5)}",
    )  # fmt: skip
    check_scope(report, "task")
    local = report["checkpoints"]["local_recovery"]
    assert local["over_budget"] > 0, local
    # buffer memory falls once an epoch commits: the final commit trims all
    assert all(size < local["peak_bytes"][t] for t, size in local["bytes"].items()
               if local["peak_bytes"][t])  # fmt: skip
    assert dump(lab, "exact_wc", "count") == wc_baseline.state
    assert sink_lines(tmp_path) == wc_baseline.lines


def test_other_tasks_keep_processing_while_the_failed_one_is_down(
    lab: Lab, wc_baseline: Baseline, tmp_path: Path
) -> None:
    """count:1 restarts slowly; count:0 and count:2 go on, never restarted."""
    inits = tmp_path / "inits"
    inits.mkdir()
    report = run_wc(
        lab, tmp_path / "out", "-o", f"exact.inits={inits}",
        "-o", "exact.restart.pause.s=2", "--kill", f"count:1@{wc_baseline.at(2.5)}",
    )  # fmt: skip
    check_scope(report, "task")
    spans = {
        int(path.stem.split("-")[1]): [
            tuple(float(x) for x in line.split("\t"))
            for line in path.read_text(encoding="utf-8").splitlines()
        ]
        for path in inits.glob("count-*.txt")
    }
    killed = sorted(spans)[1]
    others = [t for t in spans if t != killed]
    # the killed task started twice; the others once: they never stopped
    assert len(spans[killed]) == 2, spans
    assert all(len(spans[t]) == 1 for t in others), spans
    down_from, down_to = spans[killed][1]
    arrivals: Counter[int] = Counter()
    for path in inits.glob("progress-*.tsv"):
        for line in path.read_text(encoding="utf-8").splitlines():
            at, task = line.split("\t")
            if down_from < float(at) < down_to:
                arrivals[int(task)] += 1
    # while count:1 was down, the other count tasks' processed counts rose
    assert all(arrivals[t] > 0 for t in others), arrivals
    assert arrivals[killed] == 0, arrivals
    assert dump(lab, "exact_wc", "count") == wc_baseline.state
    assert sink_lines(tmp_path / "out") == wc_baseline.lines
