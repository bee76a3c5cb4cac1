"""Delivery and output logs: cuts at barriers, trimming on commit, sizes."""

from __future__ import annotations

from storm_bridge.cluster.acker import PendingInput
from storm_bridge.cluster.channels import (
    Delivery,
    Output,
    TaskLog,
    estimate_bytes,
)


def _delivery(n: int) -> Delivery:
    values = [f"word{n}"]
    message = {"id": str(n), "tuple": values}
    pending = PendingInput({}, "split", "default", list(values))
    return Delivery(str(n), message, pending, estimate_bytes(values))


def _log(deliveries: int, outputs: int) -> TaskLog:
    log = TaskLog()
    for n in range(deliveries):
        log.delivered(_delivery(n))
    for n in range(outputs):
        log.outputs.append(Output("default", [n], (n,)))
    log.next_output = outputs
    return log


def test_a_commit_trims_both_logs_to_the_epochs_cut_and_frees_bytes() -> None:
    log = _log(3, 2)
    log.input_cut(7)  # the barrier of epoch 7 went to the task
    log.delivered(_delivery(3))  # a tuple after the barrier
    log.output_cut(7)  # the task forwarded its barrier
    log.outputs.append(Output("default", ["late"], ()))
    log.next_output = 3
    before = log.size

    assert log.committed(7)
    assert [d.tuple_id for d in log.deliveries] == ["3"]
    assert len(log.outputs) == 1
    assert log.next_output == 1
    assert log.size == before - 3 * estimate_bytes(["word0"])
    assert not log.replaying


def test_a_task_without_a_barrier_tuple_is_cut_where_it_forwarded_it() -> None:
    log = _log(4, 4)
    log.output_cut(2)
    log.delivered(_delivery(4))
    assert log.committed(2)
    assert [d.tuple_id for d in log.deliveries] == ["4"]
    assert log.outputs == []


def test_an_epoch_without_a_cut_trims_nothing() -> None:
    log = _log(2, 1)
    assert not log.committed(3)
    assert len(log.deliveries) == 2


def test_a_restart_matches_re_emits_from_the_cut_and_forgets_open_cuts() -> None:
    log = _log(2, 3)
    log.output_cut(9)  # an epoch that will be abandoned
    log.restarted()
    assert log.replaying
    assert log.next_output == 0
    assert not log.committed(9)


def test_later_cuts_shift_when_an_earlier_epoch_commits() -> None:
    log = _log(2, 2)
    log.output_cut(1)
    log.delivered(_delivery(2))
    log.outputs.append(Output("default", [0], ()))
    log.output_cut(2)
    log.committed(1)
    assert log.marks == {2: (1, 1)}
    log.committed(2)
    assert log.deliveries == [] and log.outputs == [] and log.size == 0


def test_a_re_emit_matches_only_the_same_stream_and_values_as_written() -> None:
    logged = Output("default", ["a", 1], (4,))
    assert logged.matches("default", ["a", 1])
    assert logged.matches("default", ("a", 1))  # a tuple is written as a list
    assert not logged.matches("default", ["a", 2])
    assert not logged.matches("other", ["a", 1])
    # JSON writes these differently, so a re-emit of one is not the other
    assert not logged.matches("default", ["a", 1.0])
    assert not Output("default", [True], ()).matches("default", [1])
    nan = float("nan")
    assert Output("default", [nan], ()).matches("default", [nan])


def test_the_output_log_keeps_the_emitted_values_without_copying_them() -> None:
    values = ["x" * 4096]
    assert Output("default", values, ()).values is values
