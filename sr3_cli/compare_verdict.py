"""The verdict of ``sr3 compare``: do the engines end in the same state?

Every engine is compared with the first, key by key: the final committed state
of every stateful bolt (``results["runs"][engine]["state"][component]["rows"]``,
as ``sr3 state dump`` prints it), the last output per key of each sink both
engines report, and the records each engine's ``KafkaSink`` wrote to its own
topic, key by key (``results["runs"][engine]["kafka"][component]["rows"]``,
:mod:`sr3_cli.compare_kafka`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["FIRST_KEYS", "verdict"]

#: Differing keys named per component in the verdict.
FIRST_KEYS: Final = 5


def _differing(ref: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    return [k for k in sorted(set(ref) | set(other)) if ref.get(k) != other.get(k)]


def verdict(results: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``agree`` and ``differences``: every engine against the first.

    Final states are compared key by key for every stateful bolt; sink outputs
    (last output per key) and Kafka sink records (every record per key) where
    both engines report the sink.
    """
    engines = list(results["engines"])
    runs = results["runs"]
    ref_name = engines[0]
    ref = runs[ref_name]
    differences: list[dict[str, Any]] = []
    compared: list[dict[str, Any]] = []
    for engine in engines[1:]:
        run = runs[engine]
        for what, ours, theirs in (
            ("state", _rows(ref["state"]), _rows(run["state"])),
            (
                "outputs",
                ref["report"].get("outputs", {}),
                run["report"].get("outputs", {}),
            ),
            ("kafka", _rows(ref.get("kafka", {})), _rows(run.get("kafka", {}))),
        ):
            for component in sorted(
                set(ours) | set(theirs) if what == "state" else set(ours) & set(theirs)
            ):
                a, b = ours.get(component, {}), theirs.get(component, {})
                keys = _differing(a, b)
                compared.append(
                    {
                        "engine": engine,
                        "what": what,
                        "component": component,
                        "keys": len(set(a) | set(b)),
                        "differing": len(keys),
                    }
                )
                if keys:
                    differences.append(
                        {
                            "engine": engine,
                            "reference": ref_name,
                            "what": what,
                            "component": component,
                            "differing": len(keys),
                            "first_keys": [
                                {"key": k, ref_name: a.get(k), engine: b.get(k)}
                                for k in keys[:FIRST_KEYS]
                            ],
                        }
                    )
    return {
        "agree": not differences,
        "reference": ref_name,
        "compared": compared,
        "differences": differences,
    }


def _rows(state: Mapping[str, Any]) -> dict[str, Any]:
    return {name: s["rows"] for name, s in state.items()}
