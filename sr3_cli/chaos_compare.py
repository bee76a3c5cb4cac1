"""How a chaos schedule's end is compared with the failure-free run (``--compare``).

Exactly-once promises a final state that some failure-free run gives. For most
topologies every failure-free run gives the same one, and a schedule must end in
it exactly. A topology whose state keeps tuples in the order they arrived (a
join's rows per key, a log per key) merged from several upstream tasks ends in a
different order from one failure-free run to the next; its schedules can only be
held to the same items in some order. ``--compare auto`` (the default) tells the
two apart by running the failure-free run twice:

* both end alike: every schedule is compared exactly;
* they differ only in the order of list items: lists are compared as multisets
  (:func:`unordered_form`), and the last outputs only where the two runs agree
  on them;
* they differ otherwise: the topology's result is not a function of its input,
  and the campaign is refused (no schedule could be checked).

``exact`` and ``unordered`` force one comparison with one failure-free run.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    "choose_comparison",
    "state_difference",
    "unordered_form",
]

EXACT: Final = "exact"
UNORDERED: Final = "unordered"
AUTO: Final = "auto"
COMPARE_MODES: Final = (AUTO, EXACT, UNORDERED)

#: A failure-free run's final state (by component) and last outputs (None: none).
Ending = tuple[Mapping[str, Any], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Comparison:
    """How every schedule's end is held to the failure-free run's."""

    #: Lists (at any depth of a value) compared as multisets.
    unordered: bool = False
    #: Last outputs compared (where the failure-free runs agree on them).
    outputs: bool = True
    #: Why, for the campaign's report.
    note: str = "exact"

    @property
    def name(self) -> str:
        """``exact`` or ``unordered``."""
        return UNORDERED if self.unordered else EXACT

    def form(self, value: Any) -> Any:
        """The form ``value`` is compared in."""
        return unordered_form(value) if self.unordered else value


def unordered_form(value: Any) -> Any:
    """``value`` with every list and tuple in it sorted (a multiset's form).

    Items sort by their ``repr``, so items of mixed types sort too; mappings
    keep their keys and have their values put in the same form.
    """
    if isinstance(value, Mapping):
        return {k: unordered_form(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = sorted((unordered_form(v) for v in value), key=repr)
        return items if isinstance(value, list) else tuple(items)
    return value


def state_difference(
    state: Mapping[str, Any],
    expected: Mapping[str, Any],
    comparison: Comparison | None = None,
) -> str:
    """Return what differs from ``expected`` (by component), or ``""``."""
    form = (comparison or Comparison()).form
    for component, keys in expected.items():
        got = state.get(component, {})
        if form(got) == form(keys):
            continue
        wrong = sorted(
            (k for k in set(got) | set(keys) if form(got.get(k)) != form(keys.get(k))),
            key=repr,
        )
        first = wrong[0]
        return (
            f"{component}: {len(wrong)} keys differ, first {first!r}: "
            f"{got.get(first)!r} instead of {keys.get(first)!r}"
        )
    return ""


def choose_comparison(
    mode: str, path: Path | str, first: Ending, second: Ending | None
) -> Comparison:
    """Return the comparison of ``--compare MODE`` after the failure-free run(s).

    Args:
        mode: ``auto``, ``exact`` or ``unordered``.
        path: The topology file (for messages).
        first: The failure-free run's ending.
        second: A second failure-free run's ending (``auto`` needs it).

    Raises:
        ConfigError: Under ``auto``, the two runs end in different states even
            with lists compared as multisets.
    """
    if mode == EXACT:
        return Comparison(note="exact (--compare exact)")
    if mode == UNORDERED:
        return Comparison(
            unordered=True, note="lists as multisets (--compare unordered)"
        )
    if second is None:
        msg = "--compare auto needs two failure-free runs"
        raise ValueError(msg)
    (state, outputs), (again, outputs_again) = first, second
    if state == again and outputs == outputs_again:
        return Comparison(note="exact: two failure-free runs ended alike")
    unordered = Comparison(unordered=True)
    differ = state_difference(again, state, unordered)
    if differ:
        msg = (
            f"two failure-free runs of {path} end in different states even with "
            f"lists compared as multisets ({differ}): its result depends on more "
            "than the order tuples arrive in, so no schedule can be checked "
            "against it; make each key's state a function of the tuples it got"
        )
        raise ConfigError(msg)
    same_outputs = outputs is None or unordered_form(dict(outputs)) == unordered_form(
        dict(outputs_again or {})
    )
    where = state_difference(again, state) or "their last outputs"
    note = (
        "lists as multisets: two failure-free runs differed in the order of "
        f"list items ({where.split(':', 1)[0]})"
    )
    if not same_outputs:
        note += "; last outputs not compared (the two runs' differ)"
    return Comparison(unordered=True, outputs=same_outputs, note=note)
