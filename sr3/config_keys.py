"""What an ``sr3.*`` key is: its type, default, accepted values, scope and doc.

:class:`Key` holds one row of the table in :mod:`sr3.config_table` and is the
one validation of every key: :meth:`Key.parse` turns a raw value (JSON from a
Storm conf, a string from a Spark conf or an environment variable) into a typed
one, or raises :class:`~sr3.errors.ConfigError` naming the key, the value and
the accepted values. The value types are :mod:`sr3.config_values`'.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sr3.config_values import BOOL, SECONDS, SIZE, STORM_SECONDS, Kind
from sr3.errors import ConfigError

__all__ = ["Key", "Scope"]


class Scope(enum.Enum):
    """Where a key is read, so where setting it has an effect."""

    CLUSTER = "cluster"
    TOPOLOGY = "topology"
    COMPONENT = "component"
    KAFKA = "Kafka spout and sink"
    KAFKA_SPOUT = "Kafka spout"
    KAFKA_SINK = "Kafka sink"

    @property
    def doc(self) -> str:
        """One line saying where to set a key of this scope."""
        return _SCOPE_DOCS[self]


_SCOPE_DOCS: Final = {
    Scope.CLUSTER: "every process of a cluster (ring nodes, the CLI, tasks) "
    "reads it; set it alike everywhere (`SR3_*` variables, Storm or Spark conf)",
    Scope.TOPOLOGY: "one value per topology: its config or `sr3 run -o`",
    Scope.COMPONENT: "the topology's config, overridden by a component's own config",
    Scope.KAFKA: "the config of a Kafka spout or sink component (or the topology)",
    Scope.KAFKA_SPOUT: "the config of a Kafka spout component (or the topology)",
    Scope.KAFKA_SINK: "the config of a Kafka sink component (or the topology)",
}


@dataclass(frozen=True)
class Key:
    """One ``sr3.*`` key: the one place its type, default and range are defined.

    An unset key, ``null`` and (unless ``blank`` is False) the empty string all
    mean the default.

    Attributes:
        name: The dotted key, as ``sr3.ring.vnodes``.
        section: The :class:`~sr3.config.Sr3Config` section holding it.
        attr: Its attribute in that section.
        kind: Its value type.
        default: Its default (also the section's field default).
        scope: Where it is read.
        doc: One line for the docs.
        low: Smallest accepted number (with ``above``: numbers above it).
        high: Largest accepted number.
        above: ``low`` itself is refused.
        choices: The accepted values of a choice.
        accepted: The accepted values in words (generated when empty).
        note: Appended to the accepted values (``0 disables scrubbing``).
        env: ``Sr3Config.from_env`` reads it from ``SR3_<KEY>``.
        blank: The empty string means the default.
        secret: Error messages show ``***`` instead of the value.
        check: Further check of a typed value: returns what is wrong, or None.
    """

    name: str
    section: str
    attr: str
    kind: Kind
    default: Any
    scope: Scope
    doc: str
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    accepted: str = ""
    note: str = ""
    env: bool = False
    blank: bool = True
    secret: bool = False
    check: Callable[[Any], str | None] | None = None

    @property
    def env_var(self) -> str:
        """The environment variable of the key (``SR3_RING_VNODES``)."""
        return self.name.upper().replace(".", "_")

    def accepted_values(self) -> str:
        """The accepted values in words, as error messages and docs give them."""
        text = self.accepted or self._generated()
        return f"{text} ({self.note})" if self.note else text

    def _generated(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is BOOL:
            return "true or false"
        unit = " seconds" if self.kind in (SECONDS, STORM_SECONDS) else ""
        unit = " bytes" if self.kind is SIZE else unit
        if self.low is not None and self.high is not None and not unit:
            return f"{self.low:g}..{self.high:g}"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.above else '>='} {self.low:g}")
        if self.high is not None:
            bounds.append(f"<= {self.high:.0f}")
        return (" and ".join(bounds) + unit) if bounds else f"any {self.kind.name}"

    def error(self, value: object, problem: str, *, where: str = "") -> ConfigError:
        """Return the error of an invalid value: key, value, problem, accepted values.

        Args:
            value: The value as given.
            problem: What is wrong with it, as ``is out of range``.
            where: What the value belongs to, as ``component 'count':``
                (default ``sr3 config``).
        """
        shown = "***" if self.secret else repr(value)
        msg = (
            f"{where or 'sr3 config'} {self.name}={shown} {problem}; "
            f"use {self.accepted_values()}"
        )
        return ConfigError(msg)

    def problem(self, value: Any) -> str | None:
        """Say what is wrong with a typed value (range, choices, check), or None."""
        if value is None and self.default is None:
            return None
        if self.choices and value not in self.choices:
            return "is not one of the accepted values"
        low_ok = (
            self.low is None
            or value > self.low
            or (value == self.low and not self.above)
        )
        if not low_ok or (self.high is not None and not value <= self.high):
            return "is out of range"
        return self.check(value) if self.check is not None else None

    def validate(self, value: Any, *, where: str = "") -> None:
        """Check a typed value against the key's range, choices and check.

        Raises:
            ConfigError: the value is outside them.
        """
        problem = self.problem(value)
        if problem is not None:
            raise self.error(value, problem, where=where)

    def parse(self, raw: object, *, where: str = "") -> Any:
        """Return the typed, checked value of ``raw`` (the default when unset).

        Raises:
            ConfigError: ``raw`` is not of the key's type or not accepted.
        """
        if raw is None or (self.blank and raw == ""):
            return self.default
        try:
            value = self.kind.convert(raw)
        except ValueError as exc:
            raise self.error(raw, str(exc), where=where) from None
        problem = self.problem(value)
        if problem is not None:
            raise self.error(raw, problem, where=where)
        return value

    def read(self, conf: Mapping[str, Any], *, where: str = "") -> Any:
        """Return the key's typed, checked value in ``conf`` (the default if unset).

        Raises:
            ConfigError: the value is not accepted.
        """
        return self.parse(conf.get(self.name), where=where)
