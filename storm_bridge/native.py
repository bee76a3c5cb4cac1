"""Checkpoints that need nothing but Storm's multilang side and ZooKeeper.

Under ``sr3.checkpoint.mode=native`` (what ``sparse submit`` uses; ``sr3 run``
defaults to ``local``, the local cluster's aligned barriers), epochs are
stop-the-world and coordinated in ZooKeeper (:mod:`zk.epochs`); Storm's acking
tells when the topology is quiescent. Phases of the control record::

    RUNNING(e, g) --interval--> PAUSE(e+1, g) --every spout drained-->
    SNAPSHOT(e+1, g) --every owner wrote its snapshot--> commit e+1,
    RUNNING(e+1, g)

    any phase --generation bumped to g'--> ROLLBACK(e, g') --every spout
    drained--> RESTORE(e, g') --every owner restored the committed epoch-->
    RUNNING(e, g')

* The coordinator is spout task 0 of the replayable spout component first by
  name; it holds an ephemeral znode and runs on a thread of that task.
* A replayable spout emits nothing before it sees the first control record,
  then with a message id, so Storm tracks each tree. On
  PAUSE it stops emitting, waits until every tree it emitted is acked or failed,
  and reports its offset; on RUNNING it goes on. A failed tree (a tuple that
  raised, timed out, or died with a task, stateless or not) bumps the
  generation: the whole topology rolls back to the last committed epoch, so
  the failure never changes the state's exactly-once effect. Replaying from the
  spout alone would not do: stateful tasks downstream have seen the tuples after
  the failed one (a counter would count them twice) and a join that already
  emitted would not emit again. After :data:`MAX_REPLAYS` failures at one
  offset (a poison tuple) the rollback replays without it.
* Stateful bolts see the control record through a ZooKeeper watch: on SNAPSHOT
  they write their keyed state to the ring and report; on RESTORE they restore
  the committed epoch. A straggler of a failed tree must never leak into
  restored state: every emit of a replayable spout carries the generation it
  follows (:data:`~storm_bridge.messages.GENERATION_KEY`), the local cluster
  passes it on to every tuple anchored on it, and a stateful bolt drops a data
  tuple of a generation older than its last restore whenever it comes
  (:meth:`BoltAgent.stale`); once every owner restored and saw only such
  tuples, spouts resume at once. Storm's own ShellBolt drops the key: there
  the generation travels in a hidden trailing tuple field
  (:mod:`storm_bridge.generation_field`), turned back into the key before the
  bolt reads it. A tuple with no generation at all (unanchored, through a Java
  bolt, or a ``sparse submit`` without the field) is instead ignored until
  RUNNING, which waits ``sr3.checkpoint.rollback.quiet.s`` without one (a
  fallback bounded by time: a task stalled longer can still leak one).
* A rollback asked for before the coordinator wrote its first control record
  (a tree failed, a task restarted) makes that record a ROLLBACK: spouts may
  have emitted and owners counted already.
* A stateful bolt or replayable spout task that (re)starts while the protocol
  runs bumps the generation: spouts stop emitting, every owner restores the
  committed epoch, spouts seek to its offsets. Where every tuple carries its
  generation (the hidden field) spouts do not wait for their trees in flight:
  on real Storm those lost with a crashed worker only fail after
  ``topology.message.timeout.secs`` (30 s by default), and owners drop them by
  generation anyway. Where tuples may carry none, spouts drain first (failed
  and timed-out trees count), which that timeout bounds.

This module holds the protocol's settings (:func:`checkpoint_mode`,
:func:`require_ring`); the coordinator's state machine and thread are in
:mod:`storm_bridge.native_coordinator`, the tasks' decisions in
:mod:`storm_bridge.native_agents`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sr3.config_table import read_setting
from sr3.errors import ConfigError
from storm_bridge.native_agents import MAX_REPLAYS, BoltAgent, SpoutAgent
from zk.epoch_control import step_name

__all__ = [
    "LOCAL",
    "MAX_REPLAYS",
    "MODE_KEY",
    "NATIVE",
    "OWNER",
    "QUIET_KEY",
    "SPOUT",
    "BoltAgent",
    "SpoutAgent",
    "checkpoint_mode",
    "require_ring",
    "step_name",
]

#: Conf key choosing the checkpoint protocol.
MODE_KEY: Final = "sr3.checkpoint.mode"
#: Conf key of the time a rollback waits without stragglers before resuming.
QUIET_KEY: Final = "sr3.checkpoint.rollback.quiet.s"
LOCAL: Final = "local"
NATIVE: Final = "native"
#: Registration kinds.
SPOUT: Final = "spout"
OWNER: Final = "owner"


def checkpoint_mode(conf: Mapping[str, Any]) -> str:
    """Return ``sr3.checkpoint.mode`` of a Storm conf (default ``local``).

    Raises:
        ConfigError: the value is neither ``local`` nor ``native``.
    """
    return str(read_setting(conf, MODE_KEY))


E_NO_RING: Final = (
    "task {task}: sr3.checkpoint.mode=native but sr3.zk.hosts is not set, so its "
    "state would live in this process only and be lost at the first failure; set "
    "sr3.zk.hosts (and sr3.zk.chroot) in the topology conf, e.g. `sparse submit "
    "-o sr3.zk.hosts=zk1:2181`, or in config.json's env options"
)


def require_ring(ring: object | None, conf: Mapping[str, Any], task: str) -> None:
    """Refuse to run a task in native mode without the ring.

    Raises:
        ConfigError: native mode is asked for and ``ring`` is None.
    """
    if ring is None and checkpoint_mode(conf) == NATIVE:
        raise ConfigError(E_NO_RING.format(task=task))
