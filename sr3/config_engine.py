"""The config sections the engines read: checkpoints, Storm, outputs, Kafka.

Composed into :class:`sr3.config.Sr3Config` next to the cluster's sections;
their keys are rows of :data:`sr3.config_table.KEYS` like every other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from sr3.config_table import section_values, validate_section

__all__ = [
    "CheckpointConfig",
    "KafkaConfig",
    "MetricsConfig",
    "OutputConfig",
    "StormConfig",
]


class _Section:
    """What every section does with its rows of the table: validate, read a conf."""

    SECTION: ClassVar[str]

    def __post_init__(self) -> None:
        validate_section(self, self.SECTION)

    @classmethod
    def from_mapping(cls, conf: Mapping[str, Any]) -> Self:
        """Read this section's keys of a (merged) Storm conf; others are ignored.

        Raises:
            ConfigError: a value is not accepted.
        """
        return cls(**section_values(cls.SECTION, conf))


@dataclass(frozen=True)
class CheckpointConfig(_Section):
    """The checkpoint protocol of a topology (one value per topology).

    Attributes:
        interval_s: ``sr3.checkpoint.interval.s``, time between checkpoint
            epochs (default 1 s).
        timeout_s: ``sr3.checkpoint.timeout.s``, an epoch not committed after
            this long is aborted and rolled back (default 60 s).
        mode: ``sr3.checkpoint.mode``, ``local`` (default: ``sr3 run``'s
            coordinator drives the epochs) or ``native`` (the tasks run the
            protocol over ZooKeeper, as on a real Storm cluster).
        retain: ``sr3.checkpoint.retain``, committed epochs kept restorable
            with ``--from-epoch``, the last one included (default 1).
        rollback_quiet_s: ``sr3.checkpoint.rollback.quiet.s``, native mode where
            tuples carry no generation (a real Storm cluster): time a rollback
            waits without stragglers before resuming (default 1 s).
        straggler_policy: ``sr3.straggler.policy``, local cluster: ``off``
            (default), ``duplicate`` (race a copy started from the last
            checkpoint) or ``restart`` (kill it, as a crash).
        straggler_lag_s: ``sr3.straggler.lag.s``, silence that makes a task a
            straggler (default 5 s).
        straggler_rate_ratio: ``sr3.straggler.rate.ratio``, rate below this
            fraction of the peers' median (or a queue over 1/ratio times
            theirs) makes a task with a queue a straggler (default 0.2).
        straggler_queue_min: ``sr3.straggler.queue.min``, queued inputs before
            rate and queue count (default 1000).
        straggler_check_s: ``sr3.straggler.check.s``, time between checks
            (default 1 s).
        recovery_scope: ``sr3.recovery.scope``: ``task`` (default: only the
            failed task restores; on real Storm the restarted ones) or
            ``global`` (every task rolls back).
        recovery_buffer_bytes: ``sr3.recovery.buffer.bytes``: bound of one
            task's delivery log (local cluster) or of what a stateful task
            keeps to drop replays (real Storm; default 64 MiB).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    SECTION: ClassVar[str] = "checkpoint"
    interval_s: float = 1.0
    timeout_s: float = 60.0
    mode: str = "local"
    retain: int = 1
    rollback_quiet_s: float = 1.0
    straggler_policy: str = "off"
    straggler_lag_s: float = 5.0
    straggler_rate_ratio: float = 0.2
    straggler_queue_min: int = 1000
    straggler_check_s: float = 1.0
    recovery_scope: str = "task"
    recovery_buffer_bytes: int = 64 * 1024**2


@dataclass(frozen=True)
class MetricsConfig(_Section):
    """Each process's Prometheus endpoint (ring nodes and topology runs).

    Attributes:
        enabled: ``sr3.metrics.enabled``, serve the metrics of docs/metrics.md
            (default True).
        port: ``sr3.metrics.port``, the endpoint's port on 127.0.0.1 (default
            0: a free one, advertised where ``sr3 status`` finds it).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    SECTION: ClassVar[str] = "metrics"
    enabled: bool = True
    port: int = 0


@dataclass(frozen=True)
class StormConfig(_Section):
    """Storm compatibility and the local cluster.

    Attributes:
        integer_boxing: ``sr3.storm.json.integer.boxing``, how fields groupings
            hash JSON integers: ``long`` (default; json-simple, Storm < 2.6) or
            ``integer`` (json-smart, Storm >= 2.6).
        idle_quiet_s: ``sr3.idle.quiet.s``, spouts: how long ``next`` must emit
            nothing before the spout counts as dry for ``--until-idle``
            (default 2 s; a JSON number, as Storm's conf validation requires;
            none for a spout that said its input ended, ``end_of_input``).
        rebalance_routing: ``sr3.rebalance.routing``, local cluster: ``fields``
            (default; Storm's hash mod tasks) or ``key-groups`` (a fields
            grouping into a stateful bolt routes through a versioned key group
            -> task table; ``sr3 rebalance`` moves key groups between live
            tasks, see docs/rebalance.md).
        rebalance_batch_key_groups: ``sr3.rebalance.batch.key.groups``, key
            groups a key-groups rebalance moves per epoch (default 16).
        fork_tasks: ``sr3.local.fork.tasks``, local cluster: fork each Python
            task from a pre-imported interpreter (default True), or execute
            ``streamparse_run`` for each, as Storm's supervisor does (False).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    SECTION: ClassVar[str] = "storm"
    integer_boxing: str = "long"
    rebalance_routing: str = "fields"
    rebalance_batch_key_groups: int = 16
    fork_tasks: bool = True
    idle_quiet_s: float = 2.0


@dataclass(frozen=True)
class OutputConfig(_Section):
    """A component's outputs and errors (per component).

    Attributes:
        key_fields: ``sr3.output.key.fields``, the fields keying a sink's output
            tuples (default None: the stream's first field).
        on_error: ``sr3.on.error``, Spark engine: what a bolt's exception does,
            ``fail`` (default: fail the query) or ``dead-letter`` (divert the
            tuple to a dead row).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    SECTION: ClassVar[str] = "output"
    key_fields: tuple[str, ...] | None = None
    on_error: str = "fail"


@dataclass(frozen=True)
class KafkaConfig(_Section):
    """The Kafka spout's and sink's keys, each checked alone.

    Rules between keys (a spout needs topics or a pattern, not both) are the
    spout's and sink's settings' (``topology_api.kafka.settings``).

    Attributes:
        bootstrap: ``sr3.kafka.bootstrap``, the brokers (default empty; the
            spout and sink require it).
        topics: ``sr3.kafka.topics``, topics the spout reads (default none).
        topic_pattern: ``sr3.kafka.topic.pattern``, a regular expression matched
            against whole topic names (default None).
        record_format: ``sr3.kafka.format``, ``text`` (default) or ``json``.
        start: ``sr3.kafka.start``, ``earliest`` (default) or ``latest``.
        topic_wait_s: ``sr3.kafka.topic.wait.s``, wait for a missing topic
            (default 0: fail at once).
        bad_records: ``sr3.kafka.bad.records``, ``fail`` (default) or
            ``dead-letter``.
        dead_letter_topic: ``sr3.kafka.dead.letter.topic`` (default None).
        batch_records: ``sr3.kafka.batch.records``, records one ``next_tuple``
            emits at most (default 500).
        poll_s: ``sr3.kafka.poll.s``, ``next_tuple``'s wait (default 0.05 s).
        sink_topic: ``sr3.kafka.sink.topic`` (default empty; the sink requires it).
        sink_guarantee: ``sr3.kafka.sink.guarantee``, ``exactly-once`` (default)
            or ``at-least-once``.
        sink_key_field: ``sr3.kafka.sink.key.field`` (default None: unkeyed).
        sink_marker_topic: ``sr3.kafka.sink.marker.topic`` (default
            ``_sr3_sink_commits``).
        sink_poll_s: ``sr3.kafka.sink.poll.s``, how often the committed epoch is
            read (default 0.05 s).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    SECTION: ClassVar[str] = "kafka"
    bootstrap: str = ""
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    record_format: str = "text"
    start: str = "earliest"
    topic_wait_s: float = 0.0
    bad_records: str = "fail"
    dead_letter_topic: str | None = None
    batch_records: int = 500
    poll_s: float = 0.05
    sink_topic: str = ""
    sink_guarantee: str = "exactly-once"
    sink_key_field: str | None = None
    sink_marker_topic: str = "_sr3_sink_commits"
    sink_poll_s: float = 0.05
