"""Tuple flow of the local cluster: routing emits, bolt acks and fails, tuple trees.

This is the part of Storm's executors that multilang components reach through
ShellBolt and ShellSpout: ``BoltOutputCollectorImpl`` (anchored emits, ack and
fail), ``SpoutOutputCollectorImpl`` (message ids, ``__ack_init``), the acker, and
the spout executor's pending map with its message timeout.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from storm_bridge.cluster.acker import (
    Acker,
    AckOutcome,
    Anchors,
    PendingInput,
    TreeResult,
    new_edge_id,
    xor_anchors,
)
from storm_bridge.cluster.context import Router, RoutingError
from storm_bridge.cluster.events import ComponentCounters
from storm_bridge.cluster.tasks import SpoutTuple, TaskRuntime, TaskState
from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import (
    SYSTEM_COMPONENT,
    SYSTEM_TASK_ID,
    TICK_STREAM,
    ShellMsg,
    bolt_tuple_msg,
)

__all__ = ["SpoutNotifier", "TupleFlow"]

#: Called with (spout task, ``ack`` or ``fail``, message id) when a tree ends.
SpoutNotifier = Callable[[TaskRuntime, str, Any], None]
_LIVE: Final = (TaskState.STARTING, TaskState.RUNNING)
#: Trees sampled for latency kept at most (the oldest go: lost or timed out).
_MAX_SAMPLED: Final = 10_000


@dataclass(slots=True)
class _SampledTree:
    """A spout emit's tree followed for its complete latency alone."""

    spout: str
    emitted_at: float
    #: Tuples of the tree delivered and not yet acked or failed.
    in_flight: int = 0


def _protocol_error(rt: TaskRuntime, detail: str) -> MultilangProtocolError:
    return MultilangProtocolError(rt.component.name, rt.task_id, detail)


class TupleFlow:
    """Moves tuples between tasks and tracks their trees.

    Args:
        tasks: All task runtimes by id.
        router: Chooses target tasks.
        counters: Counters by component id.
        rng: Source of tuple and edge ids.
        acking: Whether ackers run (``topology.acker.executors`` > 0).
        fail_lost: Fail the trees of tuples lost with a dead task at once
            (Storm lets them reach the message timeout).
        notify_spout: Queues an ``ack``/``fail`` command to a spout task.
        clock: Monotonic clock in seconds (stamps spout tuples).
        tree_acked: Told each acked tree's spout and complete latency (ms).
        sample_every: Follow the tree of every this many spout emits without
            a message id, for its latency alone (0: none); Storm samples its
            statistics likewise (``topology.stats.sample.rate``). The acker
            never sees those trees: a count of their tuples in flight does.
    """

    def __init__(
        self,
        *,
        tasks: Mapping[int, TaskRuntime],
        router: Router,
        counters: Mapping[str, ComponentCounters],
        rng: random.Random,
        acking: bool,
        fail_lost: bool,
        notify_spout: SpoutNotifier,
        clock: Callable[[], float],
        tree_acked: Callable[[str, float], None],
        sample_every: int = 0,
    ) -> None:
        self.acker = Acker()
        #: Roots of spout tuples still pending at their spout.
        self.live_roots: set[int] = set()
        self._tasks = tasks
        self._router = router
        self._counters = counters
        self._rng = rng
        self._acking = acking
        self._fail_lost = fail_lost
        self._notify_spout = notify_spout
        self._clock = clock
        self._tree_acked = tree_acked
        self._sample_every = sample_every
        self._unreliable_emits = 0
        #: Sample id -> the trees followed for latency alone (no spout hears
        #: of them).
        self._samples: dict[int, _SampledTree] = {}
        #: Barrier alignment: returns True when it holds a delivery back.
        self.gate: Callable[[int, int, tuple[Any, ...]], bool] | None = None
        #: Called after a bolt acked or failed an input.
        self.on_input_done: Callable[[TaskRuntime], None] | None = None
        #: Takes a delivery over (returns True) before it reaches its task:
        #: a rebalance holds the tuples of the component it moves.
        self.hold: Callable[[tuple[Any, ...]], bool] | None = None
        #: Called with (task, tuple id, message) after a tuple was sent to a
        #: bolt task (a straggler's input log).
        self.on_delivered: Callable[[TaskRuntime, str, dict[str, Any]], None] | None = (
            None
        )
        #: Takes a tuple for a task being recovered alone (returns True).
        self.intercept: (
            Callable[[TaskRuntime, str, dict[str, Any], PendingInput], bool] | None
        ) = None
        #: Called as a task dies: True keeps its pending inputs' trees alive.
        self.keeps_inputs: Callable[[TaskRuntime], bool] | None = None

    def _tuple_id(self, rt: TaskRuntime) -> str:
        # ShellBolt's genId: Long.toString(rand.nextLong()).
        while True:
            candidate = str(self._rng.getrandbits(64) - (1 << 63))
            if candidate not in rt.inputs:
                return candidate

    def deliver(
        self,
        target: int,
        source: str,
        source_task: int,
        stream: str,
        values: Sequence[Any],
        anchors: Anchors,
        generation: int | None = None,
        sample: int | None = None,
    ) -> None:
        """Hand a tuple to a bolt task; a task that is down loses it.

        While checkpointing, a tuple from a channel already past a barrier is
        held back by :attr:`gate` and delivered once the barrier is aligned.
        ``generation`` is the native-mode generation of its tree (fencing, see
        :mod:`storm_bridge.native`); ``sample`` the latency-sampled tree it
        belongs to, if any.
        """
        args = (
            target, source, source_task, stream, values, anchors, generation, sample
        )  # fmt: skip
        if self.gate is not None and self.gate(target, source_task, args):
            return
        self.deliver_now(*args)

    def deliver_now(
        self,
        target: int,
        source: str,
        source_task: int,
        stream: str,
        values: Sequence[Any],
        anchors: Anchors,
        generation: int | None = None,
        sample: int | None = None,
    ) -> None:
        """Hand a tuple to a bolt task without barrier alignment."""
        if self.hold is not None and self.hold(
            (target, source, source_task, stream, values, anchors)
        ):
            return
        rt = self._tasks[target]
        tuple_id = self._tuple_id(rt)
        pending = PendingInput(
            anchors, source, stream, list(values), generation=generation, sample=sample
        )
        tree = self._samples.get(sample) if sample else None
        if tree is not None:
            tree.in_flight += 1
        message = bolt_tuple_msg(
            tuple_id, source, stream, source_task, values, generation
        )
        if self.intercept is not None and self.intercept(
            rt, tuple_id, message, pending
        ):
            return
        if rt.state not in _LIVE or rt.process is None:
            self._lose(anchors.keys())
            return
        rt.inputs[tuple_id] = pending
        rt.process.send(message)
        if self.on_delivered is not None:
            self.on_delivered(rt, tuple_id, message)

    def deliver_tick(self, rt: TaskRuntime, freq_s: float) -> None:
        """Send a tick tuple (``__system``/``__tick``, task -1) to a bolt task."""
        rate = int(freq_s) if float(freq_s).is_integer() else freq_s
        self.deliver(
            rt.task_id, SYSTEM_COMPONENT, SYSTEM_TASK_ID, TICK_STREAM, [rate], {}
        )

    def _route(self, rt: TaskRuntime, msg: ShellMsg) -> list[int]:
        try:
            if rt.settings.sanity_check:
                self._router.check_fields(rt.task_id, msg.stream, msg.values)
            if msg.task == 0:
                return self._router.targets(rt.task_id, msg.stream, msg.values)
            return self._router.direct_targets(rt.task_id, msg.stream, msg.task)
        except RoutingError as exc:
            detail = (
                f"emit of {list(msg.values)!r} on stream {msg.stream!r} failed: {exc}"
            )
            raise _protocol_error(rt, detail) from exc

    def _count_emit(self, rt: TaskRuntime, targets: Sequence[int]) -> None:
        counters = self._counters[rt.component.name]
        counters.emitted += 1
        counters.transferred += len(targets)

    def bolt_emit(self, rt: TaskRuntime, msg: ShellMsg) -> list[int] | None:
        """Route a bolt's emit; return the task ids to send back, if wanted.

        Raises:
            MultilangProtocolError: an anchor is not pending, or routing fails.
        """
        parents: list[PendingInput] = []
        for anchor in msg.anchors:
            parent = rt.inputs.get(anchor)
            if parent is None:
                raise _protocol_error(rt, f"Anchored onto {anchor} after ack/fail")
            parents.append(parent)
        targets = self._route(rt, msg)
        rt.emits_since_ack += 1
        # a tuple belongs to the newest generation among its parents' trees
        known = [p.generation for p in parents if p.generation is not None]
        generation = max(known) if known else None
        sample = next((p.sample for p in parents if p.sample), None)
        for target in targets:
            anchors = xor_anchors(parents, self._rng) if self._acking else {}
            self.deliver(
                target,
                rt.component.name,
                rt.task_id,
                msg.stream,
                msg.values,
                anchors,
                generation,
                sample,
            )
        self._count_emit(rt, targets)
        return targets if msg.task == 0 and msg.need_task_ids else None

    def _take_input(self, rt: TaskRuntime, msg: ShellMsg, verb: str) -> PendingInput:
        tuple_id = msg.msg_id
        pending = rt.inputs.pop(tuple_id, None) if isinstance(tuple_id, str) else None
        if pending is None:
            raise _protocol_error(
                rt, f"{verb} a non-existent or already acked/failed id: {tuple_id!r}"
            )
        return pending

    def bolt_ack(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        """Ack an input: XOR its id and its children's into each of its roots.

        Raises:
            MultilangProtocolError: the id is not pending.
        """
        pending = self._take_input(rt, msg, "Acked")
        self._counters[rt.component.name].acked += 1
        rt.processed += 1
        rt.emits_since_ack = 0
        if self._acking:
            for root, edge in pending.anchors.items():
                self._settle(self.acker.ack(root, edge ^ pending.ack_value))
        self._sample_done(pending, acked=True)
        if self.on_input_done is not None:
            self.on_input_done(rt)

    def bolt_fail(self, rt: TaskRuntime, msg: ShellMsg) -> None:
        """Fail an input: its roots fail.

        Raises:
            MultilangProtocolError: the id is not pending.
        """
        pending = self._take_input(rt, msg, "Failed")
        self._counters[rt.component.name].failed += 1
        rt.processed += 1
        rt.emits_since_ack = 0
        if self._acking:
            self._lose(pending.roots, force=True)
        self._sample_done(pending, acked=False)
        if self.on_input_done is not None:
            self.on_input_done(rt)

    def spout_emit(self, rt: TaskRuntime, msg: ShellMsg) -> list[int] | None:
        """Route a spout's emit, tracking it when it carries a message id.

        Raises:
            MultilangProtocolError: routing fails.
        """
        targets = self._route(rt, msg)
        rt.emitted_in_command += 1
        self._count_emit(rt, targets)
        name = rt.component.name
        if msg.msg_id is not None and self._acking:
            root = new_edge_id(self._rng)
            init_value = 0
            for target in targets:
                edge = new_edge_id(self._rng)
                init_value ^= edge
                self.deliver(
                    target,
                    name,
                    rt.task_id,
                    msg.stream,
                    msg.values,
                    {root: edge},
                    msg.generation,
                )
            sent = SpoutTuple(msg.msg_id, msg.stream, list(msg.values), self._clock())
            rt.pending.put(root, sent)
            self.live_roots.add(root)
            self._settle(self.acker.init(root, init_value, rt.task_id))
        else:
            sample = self._sample(name) if msg.msg_id is None else None
            for target in targets:
                self.deliver(
                    target,
                    name,
                    rt.task_id,
                    msg.stream,
                    msg.values,
                    {},
                    msg.generation,
                    sample,
                )
            if msg.msg_id is not None:  # no ackers: acked as soon as emitted
                self._counters[name].acked += 1
                self._notify_spout(rt, "ack", msg.msg_id)
        return targets if msg.task == 0 and msg.need_task_ids else None

    def _sample(self, spout: str) -> int | None:
        """Start following this emit's tree if it is sampled; return its id."""
        if not self._sample_every:
            return None
        self._unreliable_emits += 1
        if (self._unreliable_emits - 1) % self._sample_every:
            return None
        if len(self._samples) >= _MAX_SAMPLED:  # trees whose tuples were lost
            del self._samples[next(iter(self._samples))]
        self._samples[self._unreliable_emits] = _SampledTree(spout, self._clock())
        return self._unreliable_emits

    def _sample_done(self, pending: PendingInput, *, acked: bool) -> None:
        """A tuple of a followed tree was acked or failed: is the tree done?"""
        sample = pending.sample
        tree = self._samples.get(sample) if sample is not None else None
        if sample is None or tree is None:
            return
        tree.in_flight -= 1
        if not acked:
            del self._samples[sample]  # a failed tree has no latency
        elif tree.in_flight <= 0:
            del self._samples[sample]
            self._tree_acked(tree.spout, (self._clock() - tree.emitted_at) * 1000.0)

    def _settle(self, outcome: AckOutcome | None) -> None:
        if outcome is None:
            return
        self.live_roots.discard(outcome.root)
        spout = self._tasks.get(outcome.spout_task)
        info = spout.pending.remove(outcome.root) if spout is not None else None
        if spout is None or info is None:
            return  # the spout restarted or timed the tuple out already
        counters = self._counters[spout.component.name]
        if outcome.result is TreeResult.ACKED:
            counters.acked += 1
            took = self._clock() - info.emitted_at
            self._tree_acked(spout.component.name, took * 1000.0)
        else:
            counters.failed += 1
        self._notify_spout(spout, outcome.result.value, info.msg_id)

    def _lose(self, roots: Any, *, force: bool = False) -> None:
        if not (self._acking and (force or self._fail_lost)):
            return
        for root in list(roots):
            self._settle(self.acker.fail(root))

    def drop_task(self, rt: TaskRuntime, *, died: bool = False) -> int:
        """Forget what a dead task had in flight; return the tuples lost.

        A dead bolt's pending inputs fail their trees (when ``fail_lost``); a dead
        spout's pending map dies with it, as the spout executor's does in Storm.
        A task that ``died`` and is recovered alone (:attr:`keeps_inputs`)
        loses nothing: its inputs are fed again.
        """
        if died and self.keeps_inputs is not None and self.keeps_inputs(rt):
            if rt.is_spout:
                self.live_roots.difference_update(rt.pending.keys())
            rt.reset_protocol_state()
            return 0
        lost = len(rt.inputs)
        for pending in rt.inputs.values():
            self._lose(pending.roots)
        if rt.is_spout:
            lost = len(rt.pending)
            self.live_roots.difference_update(rt.pending.keys())
        rt.reset_protocol_state()
        return lost

    def busy(self, rt: TaskRuntime) -> bool:
        """Whether a bolt task holds an input that may still matter.

        Unanchored inputs always do, but for the ticks of a bolt that never
        acks them (``auto_ack = False``; ShellBolt would keep them forever);
        anchored ones only while one of their roots is pending at its spout
        (a timed-out tree is over, even if the bolt never acks its tuples).
        """
        return any(
            (not pending.anchors and rt.owes(tuple_id))
            or not self.live_roots.isdisjoint(pending.roots)
            for tuple_id, pending in rt.inputs.items()
        )

    def expire_spout(self, rt: TaskRuntime) -> int:
        """Rotate a spout's pending map; fail what expired. Return the count."""
        expired = rt.pending.rotate()
        self.live_roots.difference_update(expired)
        counters = self._counters[rt.component.name]
        for info in expired.values():
            counters.failed += 1
            counters.timed_out += 1
            self._notify_spout(rt, "fail", info.msg_id)
        return len(expired)
