"""The engine-neutral contract of stateful bolts and replayable spouts.

``storm_bridge``'s :class:`~storm_bridge.StatefulBolt` and
:class:`~storm_bridge.ReplayableSpout` implement these contracts; both engines
ask a user's component class about them through this module, never through
the other engine's classes. A class takes part by inheriting a contract (or by
setting its marker attribute, as hand-written test components do).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

__all__ = [
    "FIXED_PARALLELISM_MARKER",
    "NONDETERMINISTIC_ATTR",
    "REPLAYABLE_MARKER",
    "STATEFUL_MARKER",
    "ReplayableComponent",
    "StatefulComponent",
    "fixed_parallelism",
    "is_nondeterministic_class",
    "is_replayable_class",
    "is_stateful_class",
    "overrides_state_key",
]

#: Class attribute that marks a component class as stateful (checkpointed state).
STATEFUL_MARKER: Final = "sr3_stateful"
#: Class attribute that marks a spout class as replayable (it seeks to offsets).
REPLAYABLE_MARKER: Final = "sr3_replayable"
#: Class attribute of a stateful bolt whose task count must not change: why.
FIXED_PARALLELISM_MARKER: Final = "sr3_fixed_parallelism"
#: Class attribute a component sets to declare its outputs nondeterministic
#: (time, randomness): a failure of one of its tasks is then recovered globally.
NONDETERMINISTIC_ATTR: Final = "sr3_nondeterministic"


class StatefulComponent:
    """A bolt with keyed state, checkpointed and restored by the engine.

    Users override :meth:`state_key` to key state otherwise than by the values
    of the fields grouping feeding the bolt; the engine hosting the bolt
    implements :meth:`grouping_key`.
    """

    sr3_stateful: ClassVar[bool] = True
    #: Why the bolt's task count must stay what its committed epochs were
    #: written with (None: it rescales). Set it when state is per task, not per
    #: key (e.g. ``KafkaSink``'s pending outputs and transactional ids): a
    #: resume or a rebalance at another count is then refused with this reason.
    sr3_fixed_parallelism: ClassVar[str | None] = None

    def state_key(self, tup: Any) -> tuple[Any, ...]:
        """Return the key of ``tup``'s state: by default :meth:`grouping_key`."""
        return self.grouping_key(tup)

    def grouping_key(self, tup: Any) -> tuple[Any, ...]:
        """Return the values of ``tup``'s fields grouping's fields.

        Raises:
            NotImplementedError: the class is not hosted by an engine (subclass
                ``storm_bridge.StatefulBolt``, not this contract).
        """
        msg = (
            f"{type(self).__name__} implements no grouping_key(): subclass "
            "storm_bridge.StatefulBolt, which the engines host"
        )
        raise NotImplementedError(msg)


class ReplayableComponent:
    """A spout whose emits carry offsets, so the engine can replay from one.

    Users implement :meth:`seek`; the engine seeks the spout to the offset of
    the last committed epoch (None when nothing was committed).
    """

    sr3_stateful: ClassVar[bool] = True
    sr3_replayable: ClassVar[bool] = True

    def seek(self, offset: Any) -> None:
        """Position the source so the next emit follows ``offset`` (None: start).

        Raises:
            NotImplementedError: the subclass does not implement it.
        """
        raise NotImplementedError


def is_stateful_class(component_cls: type) -> bool:
    """Return whether a component class declares itself stateful.

    A class is stateful when it (or a base class) sets ``sr3_stateful = True``;
    both contracts do so, and the engines ask this per component.
    """
    return getattr(component_cls, STATEFUL_MARKER, False) is True


def fixed_parallelism(component_cls: type) -> str | None:
    """Why a stateful bolt class keeps its task count (``sr3_fixed_parallelism``)."""
    reason = getattr(component_cls, FIXED_PARALLELISM_MARKER, None)
    return reason if isinstance(reason, str) and reason else None


def is_replayable_class(component_cls: type) -> bool:
    """Return whether a spout class seeks to committed offsets (``sr3_replayable``)."""
    return getattr(component_cls, REPLAYABLE_MARKER, False) is True


def is_nondeterministic_class(component_cls: type) -> bool:
    """Whether a class declares its outputs nondeterministic (time, randomness)."""
    return getattr(component_cls, NONDETERMINISTIC_ATTR, False) is True


def overrides_state_key(cls: type) -> bool:
    """Whether a stateful bolt class keys its state otherwise than by its grouping.

    Such a bolt's keys carry their route, so a rescaled task gets the keys
    whose tuples it gets.
    """
    return getattr(cls, "state_key", StatefulComponent.state_key) is not (
        StatefulComponent.state_key
    )
