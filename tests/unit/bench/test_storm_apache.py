"""What the Storm benches count as the workers' CPU and as their tasks'."""

from __future__ import annotations

import pytest

from bench.storm_apache import WorkerCpu

SUPERVISOR, LOG_WRITER, WORKER, TASK = 10, 20, 30, 40
FLAGS = {"-XX:+UseSerialGC"}


def sample(task_ticks: int, worker_ticks: int, *, exiting: bool = False) -> tuple:
    stats = {
        SUPERVISOR: (1, 500),
        LOG_WRITER: (SUPERVISOR, 10),
        WORKER: (LOG_WRITER, worker_ticks),
        TASK: (WORKER, task_ticks),
    }
    # the LogWriter's command line names the worker class (it starts it)
    workers = {LOG_WRITER: FLAGS, WORKER: None if exiting else FLAGS}
    return stats, workers


def test_a_worker_read_as_it_exits_is_not_counted_again_as_its_tasks() -> None:
    cpu = WorkerCpu()
    cpu.record(*sample(100, 300))
    cpu.record(*sample(200, 600, exiting=True))  # its cmdline now reads empty

    assert cpu.ticks == {LOG_WRITER: 10, WORKER: 600}
    assert cpu.child_ticks == {TASK: 200}


def test_a_task_forked_by_a_worker_counts_as_a_task_once_it_runs() -> None:
    cpu = WorkerCpu()
    stats, workers = sample(0, 300)
    cpu.record(stats, {**workers, TASK: FLAGS})  # before its exec: a worker's copy
    cpu.record(*sample(150, 400))

    assert cpu.child_ticks == {TASK: 150}
    assert TASK not in cpu.ticks


@pytest.mark.parametrize("exiting", [False, True])
def test_cpu_before_the_measure_began_is_left_out(exiting: bool) -> None:
    cpu = WorkerCpu()
    cpu._base = {WORKER: 250, TASK: 90}
    cpu.record(*sample(100, 300))
    cpu.record(*sample(120, 320, exiting=exiting))

    assert cpu.ticks[WORKER] == 70
    assert cpu.child_ticks[TASK] == 30
