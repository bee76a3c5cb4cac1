"""Megaphone-style live rebalance: key groups move between live tasks, batch by batch.

Under ``sr3.rebalance.routing = key-groups`` (:mod:`.keygroup_routing`) a
stateful component's tuples route through its key group -> task index table, so
a rebalance moves key groups, not tasks (Megaphone, VLDB 2019). A
:class:`KeyGroupHandOver` carries one out with the phases of
:class:`~storm_bridge.cluster.rebalance_state.Rebalance`::

    ARMED --a commit, new tasks needed--> SWITCHING --they restored--> ARMED
    ARMED --barrier of epoch e sent to a sender of the next batch--> HOLDING
    HOLDING --the batch's senders wrote e, its receivers captured it: the
              batch switches (at the latest when e commits)--> ARMED (next batch)
    ARMED --a commit whose table is the target: retired tasks stop--> DONE
    HOLDING --rollback or e abandoned--> ARMED

* New tasks start first, empty (they own no key group), while everything runs.
* The moves are the fewest that balance the table
  (:func:`~topology_api.rebalance_plan.plan_key_groups`), split into batches of
  ``sr3.rebalance.batch.key.groups`` (:func:`~topology_api.rebalance_plan.batch_moves`).
* HOLDING: once the barrier of epoch ``e`` went to a sender of the batch, the
  tuples sent to it whose key group is in the batch are held; every other key
  group and task keeps flowing.
* The table switches once every sender of the batch reported its snapshot of
  ``e`` durable and every receiver captured its own (it is past ``e``'s
  barrier), without waiting for the other tasks' snapshots and the commit:
  each receiver gets an ``install`` command on its task channel (read the
  batch's key groups from the sender's snapshot at ``e``), each sender a
  ``drop``; the held tuples then go to the receivers, behind the command. No
  task restarts. A key group's pause is from its sender's barrier to its
  receiver's install report.
* Until ``e`` commits, the switch is *unsettled*: ``e``'s commit record
  carries the tables from before it (the snapshots at ``e`` hold the batch at
  its senders), a rollback before that commit restores them, and an abandoned
  ``e`` settles it (the next snapshots hold the batch whole at its receivers).
* The next batch holds from the epoch after the next one: the receivers'
  snapshots of the epoch after a switch write its batch whole (tens of MB
  at 1 GB of state), and a batch held then would wait for them and its
  install compete with them.
* The rebalance is done at the first commit whose record carries the target
  table; tasks that own nothing then retire. A rollback restores the table of
  the epoch it restores (commit records carry it) and the moves still needed
  are planned again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sr3.keygroups import encode_table
from storm_bridge.cluster.barriers import BARRIER_SOURCE
from storm_bridge.cluster.keygroup_routing import TABLE_CONF_KEY, table_conf
from storm_bridge.cluster.rebalance_state import Phase, Rebalance
from storm_bridge.cluster.tasks import TaskRuntime
from storm_bridge.messages import SYSTEM_COMPONENT, SYSTEM_TASK_ID, bolt_tuple_msg
from topology_api.barriers import KEY_GROUP_STREAM
from topology_api.rebalance_plan import KeyGroupMove, batch_moves, plan_key_groups

if TYPE_CHECKING:
    from storm_bridge.cluster.engine import Engine

__all__ = ["KeyGroupHandOver"]

logger = logging.getLogger(__name__)

#: (component, move)
Move = tuple[str, KeyGroupMove]


class KeyGroupHandOver:
    """Moves the key groups of one rebalance, batch by batch (the engine thread).

    Args:
        engine: The engine.
        rebalance: The rebalance (its phases and measurements).
        batch_size: Key groups per batch (``sr3.rebalance.batch.key.groups``).
        clock: Monotonic clock in seconds.
        grow: Adds ``n`` new tasks to a component (between epochs); returns
            their ids.
        retire: Stops the tasks of a component above ``n`` (between epochs).
    """

    def __init__(  # noqa: PLR0913 (what a hand-over drives)
        self,
        engine: Engine,
        rebalance: Rebalance,
        *,
        batch_size: int,
        clock: Callable[[], float],
        grow: Callable[[str, int], list[int]],
        retire: Callable[[str, int], None],
    ) -> None:
        self._engine = engine
        self.rebalance = rebalance
        self._size = batch_size
        self._clock = clock
        self._grow = grow
        self._retire = retire
        self._targets = {c: after for c, (_b, after) in rebalance.targets.items()}
        self._tables = engine.router.key_groups
        #: the tables of the last commit (what a rollback restores)
        self.committed = {c: list(self._tables[c]) for c in self._targets}
        self._moves: list[Move] | None = None
        self._batch: list[Move] = []
        #: sender task id -> (key groups held, hold start)
        self._holding: dict[int, tuple[frozenset[int], float]] = {}
        self.held: list[tuple[str, tuple[Any, ...]]] = []
        self._starting: set[int] = set()
        #: install command id -> (key groups, sender's hold start)
        self._installs: dict[int, tuple[list[int], float]] = {}
        self._next_id = 0
        #: the last epoch committed (a pre-fetch reads it)
        self._last_epoch: int | None = None
        self._prefetched: set[tuple[str, int]] = set()
        #: the tables before a switch whose epoch has not committed yet
        self._unsettled: dict[str, list[int]] | None = None
        #: task id -> the last epoch it captured / wrote a snapshot of
        self._captured: dict[int, int] = {}
        self._written: dict[int, int] = {}
        self._start = {c: list(self._tables[c]) for c in self._targets}
        self._kept_base = self._kept()
        self._others_base = self._others()
        rebalance.how = "key-groups"

    # -- helpers -----------------------------------------------------------------------

    def _tasks(self, component: str) -> list[int]:
        return self._engine.router.component_tasks(component)

    def _plan(self) -> list[Move]:
        """The moves still to make, planned once from the current tables."""
        if self._moves is None:
            moves: list[Move] = []
            for name, after in self._targets.items():
                moves += [(name, m) for m in plan_key_groups(self._tables[name], after)]
            self._moves = moves
        return self._moves

    def _publish(self, component: str) -> None:
        """Every task of ``component`` restarts (if it does) with the table now."""
        value = table_conf(self._tables[component])
        for task_id in self._tasks(component):
            self._engine.tasks[task_id].conf[TABLE_CONF_KEY] = value

    def _kept(self) -> dict[int, int]:
        """Processed counts of the rebalanced components' tasks that stay."""
        return {
            t: self._engine.tasks[t].processed
            for name, after in self._targets.items()
            for t in self._tasks(name)[:after]
        }

    def _others(self) -> dict[int, int]:
        """Processed counts of the other components' bolt tasks."""
        return {
            t: rt.processed
            for t, rt in self._engine.tasks.items()
            if not rt.is_spout and rt.component.name not in self._targets
        }

    def recorded_tables(self, now: Mapping[str, Any]) -> dict[str, Any]:
        """The encoded tables the open epoch's commit records, given those ``now``.

        Before an unsettled switch for the moving components: the snapshots of
        that epoch hold the batch at its senders.
        """
        moving = (self._unsettled or {}).items()
        return {**now, **{name: encode_table(t) for name, t in moving}}

    def holds(self, task_id: int) -> bool:
        """Whether tuples to ``task_id`` are held (some of its key groups move)."""
        return task_id in self._holding

    def busy(self) -> bool:
        """Whether tuples are held."""
        return bool(self.held)

    # -- hooks -------------------------------------------------------------------------

    def barrier_sent(self, rt: TaskRuntime, epoch: int) -> None:
        """Epoch ``epoch``'s barrier went to ``rt``: hold its batch's key groups now."""
        rebalance = self.rebalance
        name = rt.component.name
        if name not in self._targets:
            return
        grown = all(len(self._tasks(c)) >= n for c, n in self._targets.items())
        if rebalance.phase is Phase.ARMED and epoch >= rebalance.first_epoch and grown:
            moves = self._plan()
            batch = batch_moves([m for _c, m in moves], self._size)[0] if moves else []
            senders = {self._tasks(c)[m.sender] for c, m in moves if m in batch}
            if rt.task_id not in senders:
                return
            ids = {id(m) for m in batch}
            self._batch = [cm for cm in moves if id(cm[1]) in ids]
            rebalance.move(Phase.HOLDING)
            rebalance.epoch = epoch
            rebalance.attempts += 1
        if rebalance.phase is not Phase.HOLDING or rebalance.epoch != epoch:
            return
        index = self._tasks(name).index(rt.task_id)
        kgs = frozenset(
            m.key_group for c, m in self._batch if c == name and m.sender == index
        )
        if kgs:
            self._holding[rt.task_id] = (kgs, self._clock())

    def intercept(self, args: tuple[Any, ...]) -> bool:
        """Hold a tuple for a moving key group (True: held)."""
        target = args[0]
        holding = self._holding.get(target)
        if holding is None or args[1] == SYSTEM_COMPONENT:
            return False
        name = self._engine.task_to_component[target]
        kg = self._engine.router.key_group(args[2], args[3], args[4], name)
        if kg is None or kg not in holding[0]:
            return False
        self.held.append((name, args))
        self.rebalance.held += 1
        return True

    def captured(self, rt: TaskRuntime, epoch: int) -> None:
        """A stateful task captured its state for ``epoch``: switch if the batch may."""
        self._captured[rt.task_id] = epoch
        self._switch_early(epoch)

    def written(self, rt: TaskRuntime, epoch: int) -> None:
        """A task's snapshot of ``epoch`` is durable: switch if the batch may."""
        self._written[rt.task_id] = epoch
        self._captured[rt.task_id] = epoch
        self._switch_early(epoch)

    def _switch_early(self, epoch: int) -> None:
        """Switch the held batch before its epoch commits, once that is safe.

        Every sender's snapshot of ``epoch`` is durable (the receivers read the
        batch from it) and every receiver captured its own (the held tuples,
        of the next epoch, reach it past the barrier). The commit of
        ``epoch`` then records the tables from before the switch.
        """
        rebalance = self.rebalance
        if rebalance.phase is not Phase.HOLDING or rebalance.epoch != epoch:
            return
        for name, move in self._batch:
            tasks = self._tasks(name)
            if self._written.get(tasks[move.sender]) != epoch:
                return
            if self._captured.get(tasks[move.receiver]) != epoch:
                return
        self._unsettled = {c: list(self._tables[c]) for c in self._targets}
        self._switch(epoch)
        # the next batch is read ahead at this epoch's commit, from it: the
        # last commit's snapshots go at that commit, perhaps mid-read

    def committed_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` committed (the tables :meth:`recorded_tables` gave)."""
        rebalance = self.rebalance
        self._last_epoch = epoch
        settled, self._unsettled = self._unsettled, None
        self.committed = settled or {c: list(self._tables[c]) for c in self._targets}
        if rebalance.phase is Phase.HOLDING and rebalance.epoch == epoch:
            self._switch(epoch)
            self._prefetch_next()
            return
        if rebalance.phase is not Phase.ARMED:
            return
        grow = {
            c: after - len(self._tasks(c))
            for c, after in self._targets.items()
            if after > len(self._tasks(c))
        }
        if grow:
            rebalance.move(Phase.SWITCHING)
            rebalance.switched_at = self._clock()
            for name, n in grow.items():
                self._starting.update(self._grow(name, n))
                self._publish(name)
            return
        if not self._plan() and all(
            not plan_key_groups(self.committed[c], after)
            for c, after in self._targets.items()
        ):
            self._finish()
            return
        self._prefetch_next()

    def _switch(self, epoch: int) -> None:
        """Switch the batch's key groups to their receivers, past ``epoch``."""
        rebalance = self.rebalance
        engine = self._engine
        by_pair: dict[tuple[str, int, int], list[int]] = {}
        for name, move in self._batch:
            self._tables[name][move.key_group] = move.receiver
            key = (name, move.sender, move.receiver)
            by_pair.setdefault(key, []).append(move.key_group)
        for name in {c for c, _m in self._batch}:
            self._publish(name)
        for (name, sender, receiver), kgs in sorted(by_pair.items()):
            tasks = self._tasks(name)
            sender_rt = engine.tasks[tasks[sender]]
            since = self._holding.get(sender_rt.task_id, (frozenset(), self._clock()))[
                1
            ]
            self._next_id += 1
            self._installs[self._next_id] = (kgs, since)
            info = {"id": self._next_id, "key_groups": kgs}
            self._command(sender_rt, "drop", info)
            install = {**info, "source": sender, "epoch": epoch}
            self._command(engine.tasks[tasks[receiver]], "install", install)
        done = {id(m) for _c, m in self._batch}
        self._moves = [cm for cm in self._plan() if id(cm[1]) not in done]
        rebalance.batches += 1
        self._batch = []
        self._holding.clear()
        held, self.held = self.held, []
        for name, (_old, source, source_task, stream, values, anchors) in held:
            for new in engine.router.reroute(source_task, stream, values, name):
                engine.flow.deliver(new, source, source_task, stream, values, anchors)
        rebalance.switched_at = self._clock()
        rebalance.move(Phase.ARMED)
        # the next batch holds one epoch later: the receivers' next snapshots
        # write this batch whole, and a switch waits for its receivers' capture
        nxt = engine.coordinator.next_epoch if engine.coordinator else 0
        rebalance.first_epoch = nxt + 1
        logger.info(
            "rebalance %s: batch %s switched at epoch %s (%s key groups left)",
            rebalance.rebalance_id,
            rebalance.batches,
            epoch,
            len(self._moves),
        )

    def _prefetch_next(self) -> None:
        """Have the next batch's receivers read it ahead from the last commit.

        While the senders keep processing; the install at the batch's own
        epoch then reads only the shards written since (the deltas).
        """
        moves = self._plan()
        epoch = self._last_epoch
        if not moves or epoch is None or self._starting:
            return
        batch = batch_moves([m for _c, m in moves], self._size)[0]
        pairs: dict[tuple[str, int, int], list[int]] = {}
        for name, move in moves:
            if move in batch and (name, move.key_group) not in self._prefetched:
                self._prefetched.add((name, move.key_group))
                key = (name, move.sender, move.receiver)
                pairs.setdefault(key, []).append(move.key_group)
        for (name, sender, receiver), kgs in sorted(pairs.items()):
            tasks = self._tasks(name)
            info = {"id": 0, "key_groups": kgs, "source": sender, "epoch": epoch}
            self._command(self._engine.tasks[tasks[receiver]], "prefetch", info)
            # the sender's next base would make the receiver read it all again;
            # the receiver's would be written beside its next install
            self._command(self._engine.tasks[tasks[sender]], "postpone", {"id": 0})
            self._command(self._engine.tasks[tasks[receiver]], "postpone", {"id": 0})

    def _command(self, rt: TaskRuntime, action: str, info: dict[str, Any]) -> None:
        if rt.process is None:
            return  # it died: the rollback under way restores the table
        rt.process.send(
            bolt_tuple_msg(
                f"sr3-keygroups-{info['id']}-{action}",
                BARRIER_SOURCE,
                KEY_GROUP_STREAM,
                SYSTEM_TASK_ID,
                [action, info],
            )
        )

    def key_groups_done(self, rt: TaskRuntime, params: Any) -> None:
        """A task carried out a hand-over command (its ``sr3.keygroups`` report)."""
        report = dict(params or {})
        if report.get("action") == "prefetch":
            self.rebalance.bytes_moved += int(report.get("bytes") or 0)
            return
        if report.get("action") != "install":
            return
        entry = self._installs.pop(int(report.get("id") or 0), None)
        if entry is None:
            return
        kgs, since = entry
        now = self._clock()
        for kg in kgs:
            self.rebalance.pauses[kg] = max(
                self.rebalance.pauses.get(kg, 0.0), now - since
            )
        self.rebalance.bytes_moved += int(report.get("bytes") or 0)

    def restored(self, rt: TaskRuntime) -> None:
        """A task reported its restore: the new tasks may have all started."""
        self._starting.discard(rt.task_id)
        if self.rebalance.phase is Phase.SWITCHING and not self._starting:
            self.rebalance.move(Phase.ARMED)
            self.rebalance.first_epoch = (
                self._engine.coordinator.next_epoch if self._engine.coordinator else 0
            )
            self._prefetch_next()

    def rolled_back(self) -> None:
        """A rollback: the tables go back to the last commit's; plan again."""
        rebalance = self.rebalance
        self.held.clear()
        self._holding.clear()
        self._installs.clear()
        self._prefetched.clear()  # the restarted receivers kept nothing
        self._unsettled = None  # self.committed holds the tables before it
        for name, table in self.committed.items():
            self._tables[name][:] = table
            self._publish(name)
        self._moves = None
        self._batch = []
        rebalance.rollbacks += 1
        if rebalance.phase is Phase.HOLDING:
            rebalance.epoch = None
            rebalance.move(Phase.ARMED)
        if rebalance.phase is Phase.ARMED:
            rebalance.first_epoch = (
                self._engine.coordinator.next_epoch if self._engine.coordinator else 0
            )

    def dropped(self, epoch: int) -> None:
        """Epoch ``epoch`` was abandoned: the senders take what was held.

        A batch switched at ``epoch`` stays switched: the next snapshots hold
        it whole at its receivers, so the next commit records the tables now.
        """
        rebalance = self.rebalance
        self._unsettled = None
        if rebalance.phase is not Phase.HOLDING or rebalance.epoch != epoch:
            return
        self._holding.clear()
        self._batch = []
        held, self.held = self.held, []
        rebalance.epoch = None
        rebalance.move(Phase.ARMED)
        rebalance.first_epoch = (
            self._engine.coordinator.next_epoch if self._engine.coordinator else 0
        )
        for _name, args in held:
            self._engine.flow.deliver_now(*args)

    def _finish(self) -> None:
        """The committed tables are the targets: retire the idle tasks; done."""
        rebalance = self.rebalance
        for name, after in self._targets.items():
            if len(self._tasks(name)) > after:
                self._retire(name, after)
                self._publish(name)
        rebalance.key_groups_moved = sum(
            a != b
            for name, start in self._start.items()
            for a, b in zip(start, self._tables[name], strict=True)
        )
        now = self._kept()
        rebalance.kept_processed = sum(
            n - self._kept_base.get(t, n) for t, n in now.items()
        )
        rebalance.unmoved_processed = sum(
            n - self._others_base.get(t, n) for t, n in self._others().items()
        )
        rebalance.ended_at = self._clock()
        rebalance.move(Phase.DONE)
        logger.info("rebalance %s done: %s", rebalance.rebalance_id, rebalance)
