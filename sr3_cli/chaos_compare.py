"""How a chaos schedule's end is compared with the failure-free run (``--compare``).

Exactly-once promises a final state that some failure-free run gives. For most
topologies every failure-free run gives the same one, and a schedule must end in
it exactly. A topology whose state keeps tuples in the order they arrived (a
join's rows per key, a log per key) merged from several upstream tasks ends in a
different order from one failure-free run to the next; its schedules can only be
held to the same items in some order. ``--compare auto`` (the default) tells the
two apart by running the failure-free run twice:

* both end alike: every schedule is compared exactly;
* they differ only in the order of list items (or in the last bits of floats,
  a sum taken in another order): lists are compared as multisets and floats to
  a relative 1e-9 (:func:`same_unordered`), and the last outputs only where the
  two runs agree on them;
* they differ otherwise: the topology's result is not a function of its input,
  and the campaign is refused (no schedule could be checked).

``exact`` and ``unordered`` force one comparison with one failure-free run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sr3.errors import ConfigError

__all__ = [
    "AUTO",
    "COMPARE_MODES",
    "EXACT",
    "UNORDERED",
    "Comparison",
    "Ending",
    "FLOAT_REL_TOL",
    "choose_comparison",
    "reference_runs",
    "same_unordered",
    "state_difference",
]

EXACT: Final = "exact"
UNORDERED: Final = "unordered"
AUTO: Final = "auto"
COMPARE_MODES: Final = (AUTO, EXACT, UNORDERED)
#: Floats agree within this relative difference under ``unordered``.
FLOAT_REL_TOL: Final = 1e-9

#: A failure-free run's final state (by component) and last outputs (None: none).
Ending = tuple[Mapping[str, Any], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Comparison:
    """How every schedule's end is held to the failure-free run's."""

    #: Lists (at any depth of a value) compared as multisets, floats to a
    #: relative :data:`FLOAT_REL_TOL` (:func:`same_unordered`).
    unordered: bool = False
    #: Last outputs compared (where the failure-free runs agree on them).
    outputs: bool = True
    #: Why, for the campaign's report.
    note: str = "exact"

    @property
    def name(self) -> str:
        """``exact`` or ``unordered``."""
        return UNORDERED if self.unordered else EXACT

    def same(self, got: Any, expected: Any) -> bool:
        """Whether ``got`` is held equal to ``expected``."""
        return same_unordered(got, expected) if self.unordered else got == expected


def _rough(value: Any) -> Any:
    """``value`` with floats to 6 digits and lists sorted: what pairs items up."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        return {k: _rough(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return sorted((_rough(v) for v in value), key=repr)
    return value


def _pairing_key(value: Any) -> str:
    return repr(_rough(value))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same_unordered(got: Any, expected: Any) -> bool:
    """Whether two values agree as multisets, with floats to a relative 1e-9.

    Every list and tuple, at any depth, must hold the same items counted (a
    lost or doubled item differs) in any order; mappings the same keys; a
    float the same number within :data:`FLOAT_REL_TOL` (a sum of floats taken
    in another order rounds otherwise in its last bits); anything else equal.
    """
    if isinstance(got, float) or isinstance(expected, float):
        if not (_number(got) and _number(expected)):
            return False
        if math.isnan(got) or math.isnan(expected):
            return math.isnan(got) and math.isnan(expected)
        return math.isclose(got, expected, rel_tol=FLOAT_REL_TOL, abs_tol=1e-12)
    if isinstance(got, Mapping) and isinstance(expected, Mapping):
        return got.keys() == expected.keys() and all(
            same_unordered(got[k], expected[k]) for k in got
        )
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        if type(got) is not type(expected) or len(got) != len(expected):
            return False
        pairs = zip(
            sorted(got, key=_pairing_key),
            sorted(expected, key=_pairing_key),
            strict=True,
        )
        return all(same_unordered(g, e) for g, e in pairs)
    return bool(got == expected)


def state_difference(
    state: Mapping[str, Any],
    expected: Mapping[str, Any],
    comparison: Comparison | None = None,
) -> str:
    """Return what differs from ``expected`` (by component), or ``""``."""
    same = (comparison or Comparison()).same
    for component, keys in expected.items():
        got = state.get(component, {})
        if same(got, keys):
            continue
        wrong = sorted(
            (k for k in set(got) | set(keys) if not same(got.get(k), keys.get(k))),
            key=repr,
        )
        first = wrong[0]
        return (
            f"{component}: {len(wrong)} keys differ, first {first!r}: "
            f"{got.get(first)!r} instead of {keys.get(first)!r}"
        )
    return ""


def reference_runs(mode: str) -> int:
    """How many failure-free runs ``--compare MODE`` needs (``auto``: two)."""
    return 2 if mode == AUTO else 1


def choose_comparison(
    mode: str, path: Path | str, endings: Sequence[Ending]
) -> Comparison:
    """Return the comparison of ``--compare MODE`` after the failure-free run(s).

    Args:
        mode: ``auto``, ``exact`` or ``unordered``.
        path: The topology file (for messages).
        endings: The :func:`reference_runs` failure-free runs' endings.

    Raises:
        ConfigError: Under ``auto``, the two runs end in different states even
            with lists compared as multisets.
    """
    if mode == EXACT:
        return Comparison(note="exact (--compare exact)")
    if mode == UNORDERED:
        return Comparison(
            unordered=True,
            note=f"lists as multisets, floats to a relative {FLOAT_REL_TOL:g} "
            "(--compare unordered)",
        )
    if len(endings) != reference_runs(mode):
        msg = "--compare auto needs two failure-free runs"
        raise ValueError(msg)
    (state, outputs), (again, outputs_again) = endings
    if state == again and outputs == outputs_again:
        return Comparison(note="exact: two failure-free runs ended alike")
    unordered = Comparison(unordered=True)
    differ = state_difference(again, state, unordered)
    if differ:
        msg = (
            f"two failure-free runs of {path} end in different states even with "
            f"lists compared as multisets and floats to a relative {FLOAT_REL_TOL:g} "
            f"({differ}): its result depends on more "
            "than the order tuples arrive in, so no schedule can be checked "
            "against it; make each key's state a function of the tuples it got"
        )
        raise ConfigError(msg)
    same_outputs = outputs is None or same_unordered(
        dict(outputs), dict(outputs_again or {})
    )
    where = state_difference(again, state) or "their last outputs"
    note = (
        f"lists as multisets, floats to a relative {FLOAT_REL_TOL:g}: two "
        "failure-free runs differed in the order of list items or float rounding "
        f"({where.split(':', 1)[0]})"
    )
    if not same_outputs:
        note += "; last outputs not compared (the two runs' differ)"
    return Comparison(unordered=True, outputs=same_outputs, note=note)
