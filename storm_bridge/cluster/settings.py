"""Storm conf for the local cluster: defaults, per-component merging, typed reads.

Precedence follows Storm: ``defaults.yaml`` values < the topology class's
``config`` < the conf given to the cluster (like ``sparse -o``); then each
component's own conf overrides the few keys Storm lets a component override
(``Executor.normalizedComponentConf``), plus any non-Storm key (``sr3.*``,
``pystorm.*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sr3.config import KEYS, read_setting
from sr3.errors import ConfigError
from topology_api.errors import TopologyError
from topology_api.java_hash import IntegerBoxing
from topology_api.stormconf import (
    COMPONENT_OVERRIDABLE_KEYS,
    STORM_DEFAULTS,
    component_conf,
    topology_conf,
)

__all__ = [
    "COMPONENT_OVERRIDABLE_KEYS",
    "ClusterOptions",
    "STORM_DEFAULTS",
    "TaskSettings",
    "component_conf",
    "sample_every",
    "topology_conf",
]

#: Conf key: how long a spout must emit nothing before ``--until-idle`` calls it dry.
IDLE_QUIET_KEY: Final = "sr3.idle.quiet.s"
_DEFAULT_IDLE_QUIET_S: Final[float] = KEYS[IDLE_QUIET_KEY].default
#: Storm's ``topology.stats.sample.rate`` default (its defaults.yaml).
_DEFAULT_STATS_SAMPLE_RATE: Final = 0.05


def _optional_number(
    conf: Mapping[str, Any], key: str, *, integer: bool = False
) -> float | None:
    value = conf.get(key)
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or value < 0 or (integer and value != int(value)):
        kind = "a non-negative integer" if integer else "a non-negative number"
        msg = (
            f"Storm conf {key}={value!r} must be {kind}, as Storm's conf "
            f"validation requires; set it as -o {key}=N (or a number in the "
            "topology's config)"
        )
        raise TopologyError(msg)
    return float(value)


def _flag(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    value = conf.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        # bool("false") is True: a string here would silently mean the opposite
        msg = (
            f"Storm conf {key}={value!r} must be true or false, as Storm's conf "
            f"validation requires; set it as -o {key}=false (JSON, lower case)"
        )
        raise TopologyError(msg)
    return value


@dataclass(frozen=True)
class TaskSettings:
    """The conf values one task's runtime needs, read and checked once.

    Attributes:
        subprocess_timeout_s: Silence after which a subprocess is killed
            (``topology.subprocess.timeout.secs``, else
            ``supervisor.worker.timeout.secs``).
        message_timeout_s: ``topology.message.timeout.secs``.
        message_timeouts: ``topology.enable.message.timeouts``.
        tick_freq_s: ``topology.tick.tuple.freq.secs`` (None: no ticks).
        max_spout_pending: ``topology.max.spout.pending`` (None: unbounded).
        shellbolt_max_pending: ``topology.shellbolt.max.pending``.
        acker_tasks: ``topology.acker.executors`` (default ``topology.workers``).
        sanity_check: ``topology.testing.always.try.serialize``: check that
            emits have as many values as their stream has fields.
        boxing: How fields groupings hash JSON integers
            (``sr3.storm.json.integer.boxing``).
        idle_quiet_s: Spouts: how long ``next`` must emit nothing before the
            spout counts as dry for ``run_until_idle`` (``sr3.idle.quiet.s``,
            default 2): a spout waiting on its source is not at its end.
        stats_sample_rate: ``topology.stats.sample.rate`` (default 0.05, as
            Storm's): the share of spout emits without a message id whose
            tree is tracked anyway, for its complete latency alone.
    """

    subprocess_timeout_s: float
    message_timeout_s: float
    message_timeouts: bool
    tick_freq_s: float | None
    max_spout_pending: int | None
    shellbolt_max_pending: int
    acker_tasks: int
    sanity_check: bool
    boxing: IntegerBoxing
    idle_quiet_s: float = _DEFAULT_IDLE_QUIET_S
    stats_sample_rate: float = _DEFAULT_STATS_SAMPLE_RATE

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> TaskSettings:
        """Read the settings from an effective component conf.

        Raises:
            TopologyError: a value has the wrong type or range.
        """
        timeout = _optional_number(conf, "topology.subprocess.timeout.secs")
        if timeout is None:
            timeout = _optional_number(conf, "supervisor.worker.timeout.secs") or 30.0
        message_timeout = (
            _optional_number(conf, "topology.message.timeout.secs") or 30.0
        )
        acker = _optional_number(conf, "topology.acker.executors", integer=True)
        if acker is None:
            acker = _optional_number(conf, "topology.workers", integer=True) or 1.0
        pending = _optional_number(conf, "topology.max.spout.pending", integer=True)
        sample_rate = _optional_number(conf, "topology.stats.sample.rate")
        if sample_rate is None:
            sample_rate = _DEFAULT_STATS_SAMPLE_RATE
        if sample_rate > 1.0:
            msg = (
                f"Storm conf topology.stats.sample.rate={sample_rate!r} must be "
                "between 0 and 1 (the share of tuples sampled for statistics); "
                "set it as -o topology.stats.sample.rate=0.05"
            )
            raise TopologyError(msg)
        tick = _optional_number(conf, "topology.tick.tuple.freq.secs")
        try:
            quiet = float(read_setting(conf, IDLE_QUIET_KEY))
            boxing = IntegerBoxing.of(conf)
        except ValueError as exc:
            raise TopologyError(str(exc)) from None
        return cls(
            subprocess_timeout_s=timeout,
            message_timeout_s=message_timeout,
            message_timeouts=_flag(conf, "topology.enable.message.timeouts", True),
            tick_freq_s=tick or None,
            max_spout_pending=int(pending) if pending else None,
            shellbolt_max_pending=int(
                _optional_number(conf, "topology.shellbolt.max.pending", integer=True)
                or 100
            ),
            acker_tasks=int(acker),
            sanity_check=_flag(conf, "topology.testing.always.try.serialize", False),
            boxing=boxing,
            idle_quiet_s=quiet,
            stats_sample_rate=sample_rate,
        )


def sample_every(rate: float) -> int:
    """Return N of "every Nth tuple" for a sample rate (0: sample none)."""
    return max(1, round(1.0 / rate)) if rate > 0 else 0


@dataclass(frozen=True)
class ClusterOptions:
    """Knobs of the local cluster that are not Storm conf.

    Attributes:
        strict_commands: Bolts treat an unknown command as a protocol error and
            are restarted (default True). ShellBolt ignores unknown commands
            (False); ShellSpout always fails on one.
        fail_lost_tuples: Fail the trees of tuples lost with a dead task at once
            (default True) instead of letting them reach the message timeout as
            Storm does (False).
        spout_idle_max_s: Longest pause between ``next`` calls to a spout that
            keeps emitting nothing; pauses double from 1 ms up to it (default 0.05).
        handshake_timeout_s: Time a new subprocess has to answer the handshake
            (default 30).
        restart_backoff_s: Delay before the second restart in a row of a task that
            never came up (answered after its handshake, so its ``initialize``
            returned); it doubles from there (default 0.1).
            The first restart is immediate.
        restart_backoff_max_s: Upper bound of that delay (default 5).
        max_events: Bound of the event log (default 10000), for ``log`` and
            ``metrics`` events and for the others apart.
        fork_tasks: Start ``streamparse_run`` tasks by forking one pre-imported
            interpreter per cluster (default True;
            :mod:`storm_bridge.cluster.forkserver`), which saves each start
            most of its CPU. False executes each, as Storm's supervisor does.

    Raises:
        ConfigError: a duration or bound is not positive.
    """

    strict_commands: bool = True
    fail_lost_tuples: bool = True
    spout_idle_max_s: float = 0.05
    handshake_timeout_s: float = 30.0
    restart_backoff_s: float = 0.1
    restart_backoff_max_s: float = 5.0
    max_events: int = 10_000
    fork_tasks: bool = True

    def __post_init__(self) -> None:
        positive = {
            "spout_idle_max_s": self.spout_idle_max_s,
            "handshake_timeout_s": self.handshake_timeout_s,
            "restart_backoff_max_s": self.restart_backoff_max_s,
            "max_events": self.max_events,
        }
        for name, value in positive.items():
            if value <= 0:
                msg = f"ClusterOptions.{name}={value!r} must be positive"
                raise ConfigError(msg)
        if self.restart_backoff_s < 0:
            value = self.restart_backoff_s
            msg = f"ClusterOptions.restart_backoff_s={value!r} must not be negative"
            raise ConfigError(msg)
