"""The table of every ``sr3.*`` configuration key (:data:`KEYS`).

Each row names the key's :class:`~sr3.config.Sr3Config` section and attribute,
type, default, accepted values, scope and doc. ``docs/configuration.md`` is
generated from it (``scripts/gen-config-doc.py``); a unit test fails when a
module reads an ``sr3.*`` key this table lacks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from sr3.config_keys import Key, Scope
from sr3.config_values import (
    BOOL,
    FLOAT,
    INT,
    MAX_DURATION_S,
    NAMES,
    REGEX,
    SECONDS,
    SIZE,
    STORM_SECONDS,
    TEXT,
    TOPIC_NAMES,
    chroot_problem,
)

__all__ = [
    "KEYS",
    "MECHANISMS",
    "NOT_KEYS",
    "SECTIONS",
    "closest_keys",
    "is_config_key",
    "read_setting",
    "section_keys",
    "section_values",
    "unknown_key_message",
    "unknown_keys",
    "validate_section",
]

MECHANISMS: Final = ("star", "line", "tree", "auto")
_CLUSTER: Final = Scope.CLUSTER
_TOPOLOGY: Final = Scope.TOPOLOGY
_COMPONENT: Final = Scope.COMPONENT


def _seconds(  # noqa: PLR0913 - one table row
    name: str,
    section: str,
    attr: str,
    default: float | None,
    scope: Scope,
    doc: str,
    *,
    zero_ok: bool = False,
    note: str = "",
    env: bool = False,
) -> Key:
    """Return the row of a duration in seconds: > 0 (or >= 0), <= 1000000."""
    return Key(
        name,
        section,
        attr,
        SECONDS,
        default,
        scope,
        doc,
        low=0.0,
        above=not zero_ok,
        high=MAX_DURATION_S,
        note=note,
        env=env,
    )


def _digest_problem(value: str) -> str | None:
    return None if value == "" or ":" in value else "is not user:password"


# fmt: off
_ROWS: Final = (
    # ring: placement on the hash ring
    Key("sr3.ring.vnodes", "ring", "vnodes", INT, 2048, _CLUSTER,
        "Virtual nodes per unit of node capacity (2048 keeps primary placement "
        "within 10% of fair share over 8 nodes).", low=1, high=4096, env=True),
    Key("sr3.ring.replication.factor", "ring", "replication_factor", INT, 3,
        _CLUSTER, "Replicas per shard, on distinct nodes.", low=1, env=True),
    Key("sr3.ring.write.quorum", "ring", "write_quorum", INT, 2, _CLUSTER,
        "Replicas that must acknowledge a write.", low=1,
        accepted="1..sr3.ring.replication.factor", env=True),
    Key("sr3.ring.max.shard.bytes", "ring", "max_shard_bytes", SIZE, 4 * 1024**2,
        _CLUSTER, "Upper bound of a shard's payload.", low=1024, env=True),
    Key("sr3.state.key.groups", "ring", "key_group_count", INT, 256, _COMPONENT,
        "Key groups G of a stateful bolt's owners; recorded on their first "
        "epoch.", low=1, high=32768, env=True),
    # node: a ring node's server and its clients
    Key("sr3.node.secret", "node", "secret", TEXT, "", _CLUSTER,
        "Shared secret for the HMAC challenge (empty: lab only).",
        accepted="any text", env=True, secret=True),
    Key("sr3.node.max.frame.bytes", "node", "max_frame_bytes", SIZE,
        64 * 1024**2, _CLUSTER, "Largest frame accepted on the wire.",
        low=64 * 1024, env=True),
    _seconds("sr3.node.io.timeout.s", "node", "io_timeout_s", 30.0,
        _CLUSTER, "Socket timeout of a client request.", env=True),
    _seconds("sr3.node.connect.timeout.s", "node", "connect_timeout_s", 3.0,
        _CLUSTER, "Timeout to open a connection.", env=True),
    Key("sr3.node.chunk.bytes", "node", "chunk_bytes", SIZE, 1024**2, _CLUSTER,
        "Chunk size of streaming gets.", low=4096,
        accepted=">= 4096 bytes and below sr3.node.max.frame.bytes", env=True),
    # zk: ZooKeeper coordination
    Key("sr3.zk.hosts", "zk", "hosts", TEXT, "", _CLUSTER,
        "ZooKeeper ensemble; empty starts an embedded server.",
        accepted="HOST:PORT[,HOST:PORT], as zk1:2181,zk2:2181", env=True),
    Key("sr3.zk.chroot", "zk", "chroot", TEXT, "/sr3/default", _CLUSTER,
        "Root of this cluster's znodes.",
        accepted="an absolute path of names between single slashes, none of "
        "them '.' or '..', as /sr3/default", check=chroot_problem, env=True),
    _seconds("sr3.zk.session.timeout.s", "zk", "session_timeout_s", 2.0,
        _CLUSTER, "Requested session timeout; bounds failure detection (the "
        "server clamps it to 2..20 tickTimes).", env=True),
    _seconds("sr3.zk.connect.timeout.s", "zk", "connect_timeout_s", 15.0,
        _CLUSTER, "Time to wait for the first session.", env=True),
    Key("sr3.zk.digest", "zk", "digest", TEXT, "", _CLUSTER,
        "Optional user:password for digest ACLs on every znode created.",
        accepted="user:password, or empty", check=_digest_problem, env=True,
        secret=True),
    # repair: re-replication by the elected coordinator
    _seconds("sr3.repair.grace.s", "repair", "grace_s", 0.5, _CLUSTER,
        "Wait after a membership change before repairing, so a node that "
        "reconnects at once causes no copies.", env=True, zero_ok=True),
    _seconds("sr3.repair.scan.interval.s", "repair", "scan_interval_s", 5.0,
        _CLUSTER, "Periodic full reconcile, catching anything missed.",
        env=True),
    Key("sr3.repair.parallel.copies", "repair", "parallel_copies", INT, 8,
        _CLUSTER, "Copies in flight at once.", low=1, env=True),
    _seconds("sr3.repair.scrub.interval.s", "repair", "scrub_interval_s",
        600.0, _CLUSTER, "Each node re-reads every replica it "
        "holds this often; a replica failing its checksum is replaced.",
        note="0 disables scrubbing", env=True, zero_ok=True),
    _seconds("sr3.repair.orphan.grace.s", "repair", "orphan_grace_s", 3600.0,
        _CLUSTER, "A replica no shard record names is deleted once "
        "the coordinator has seen it unnamed this long.",
        note="0 never deletes unnamed replicas", env=True, zero_ok=True),
    # recovery: snapshot recovery
    Key("sr3.recovery.mechanism", "recovery", "mechanism", TEXT, "auto",
        _COMPONENT, "How a stateful bolt's snapshot is fetched on restore.",
        choices=MECHANISMS, env=True),
    Key("sr3.recovery.tree.fanout", "recovery", "tree_fanout", INT, 2, _CLUSTER,
        "k of the k-ary tree recovery.", low=2, env=True),
    Key("sr3.checkpoint.max.chain.length", "recovery", "max_chain_length", INT, 8,
        _COMPONENT, "Deltas after which compaction writes a new base snapshot.",
        low=1, env=True),
    _seconds("sr3.recovery.latency.target.s", "recovery", "latency_target_s",
        None, _CLUSTER, "Optional recovery latency target for the planner "
        "(unset: none).", env=True),
    Key("sr3.recovery.lazy.install", "recovery", "lazy_install", BOOL, True,
        _CLUSTER, "Keep restored key groups encoded until first touched.",
        env=True),
    Key("sr3.recovery.lazy", "recovery", "lazy", BOOL, True, _COMPONENT,
        "Local cluster: a restored stateful task processes at once; each key "
        "group is fetched from the ring when a tuple first needs it, the rest "
        "in the background (false: fetch the whole state before processing).",
        env=True),
    # checkpoint: the checkpoint protocol of a topology
    _seconds("sr3.checkpoint.interval.s", "checkpoint", "interval_s", 1.0,
        _TOPOLOGY, "Time between checkpoint epochs."),
    _seconds("sr3.checkpoint.timeout.s", "checkpoint", "timeout_s", 60.0,
        _TOPOLOGY, "An epoch not committed after this long is "
        "aborted and rolled back."),
    Key("sr3.checkpoint.mode", "checkpoint", "mode", TEXT, "local", _TOPOLOGY,
        "Checkpoint protocol: local (sr3 run's coordinator) or native (the "
        "tasks run it over ZooKeeper, as on a real Storm cluster).",
        choices=("local", "native")),
    Key("sr3.checkpoint.retain", "checkpoint", "retain", INT, 1, _TOPOLOGY,
        "Committed epochs kept restorable (sr3 run --from-epoch), the last one "
        "included; older ones are collected unless a savepoint pins them.",
        low=1),
    _seconds("sr3.checkpoint.rollback.quiet.s", "checkpoint", "rollback_quiet_s",
        1.0, _TOPOLOGY, "Native mode, where tuples carry no generation (a "
        "real Storm cluster): time a rollback waits without stragglers before "
        "resuming."),
    Key("sr3.straggler.policy", "checkpoint", "straggler_policy", TEXT, "off",
        _TOPOLOGY, "Local cluster: what happens to a task that falls behind its "
        "peers: nothing, a duplicate from its last checkpoint that races it, "
        "or a restart as after a crash.", choices=("off", "duplicate", "restart")),
    _seconds("sr3.straggler.lag.s", "checkpoint", "straggler_lag_s", 5.0,
        _TOPOLOGY, "A task silent this long (no heartbeat answer, no message) "
        "is a straggler."),
    Key("sr3.straggler.rate.ratio", "checkpoint", "straggler_rate_ratio", FLOAT,
        0.2, _TOPOLOGY, "A task with a queue of sr3.straggler.queue.min inputs "
        "that processes below this fraction of its peers' median rate (or whose "
        "queue is over 1/ratio times theirs) is a straggler.", low=0.0,
        above=True, high=1.0),
    Key("sr3.straggler.queue.min", "checkpoint", "straggler_queue_min", INT, 1000,
        _TOPOLOGY, "Inputs a task must have queued before its rate or queue "
        "counts against its peers' (a task alone: it is a straggler with that "
        "many queued and none processed since the last check).",
        low=1),
    _seconds("sr3.straggler.check.s", "checkpoint", "straggler_check_s", 1.0,
        _TOPOLOGY, "How often tasks are checked for stragglers."),
    Key("sr3.recovery.scope", "checkpoint", "recovery_scope", TEXT, "task",
        _TOPOLOGY, "What a task failure rolls back: only the failed task "
        "(task: on the local cluster it restores its own state and replays its "
        "logged input, docs/local-recovery.md; on real Storm, native mode, only "
        "the restarted tasks restore and the others drop the spouts' replay by "
        "lineage, docs/storm.md; each says when it falls back) or every task "
        "(global).", choices=("task", "global")),
    Key("sr3.recovery.buffer.bytes", "checkpoint", "recovery_buffer_bytes", SIZE,
        64 * 1024**2, _TOPOLOGY, "Scope task: estimated bytes one task may "
        "hold since its last committed checkpoint. Local cluster: its delivery "
        "log's input; over it spouts are backpressured and an epoch is forced. "
        "Real Storm: a stateful task's processed lineages and their emits; over "
        "it the next rollback is global.",
        low=1024),
    # metrics: each process's Prometheus endpoint
    Key("sr3.metrics.enabled", "metrics", "enabled", BOOL, True, _CLUSTER,
        "Serve Prometheus metrics (docs/metrics.md) from every ring node and "
        "topology run.", env=True),
    Key("sr3.metrics.port", "metrics", "port", INT, 0, _CLUSTER,
        "Port of the metrics endpoint on 127.0.0.1 (0: a free one, advertised "
        "in ZooKeeper or the lab).", low=0, high=65535,
        note="give each process of one host its own port, or 0", env=True),
    # storm: Storm compatibility and the local cluster
    Key("sr3.storm.json.integer.boxing", "storm", "integer_boxing", TEXT, "long",
        _TOPOLOGY, "How fields groupings hash JSON integers, as the Storm "
        "version the topology targets does.", choices=("long", "integer"),
        accepted="one of 'long' (Storm < 2.6), 'integer' (Storm >= 2.6)"),
    Key("sr3.rebalance.routing", "storm", "rebalance_routing", TEXT, "fields",
        _TOPOLOGY, "Local cluster: how a fields grouping into a stateful bolt "
        "routes: Storm's hash mod tasks (fields), or through a key group -> "
        "task table, so sr3 rebalance moves key groups between live tasks in "
        "batches (key-groups; docs/rebalance.md).",
        choices=("fields", "key-groups")),
    Key("sr3.rebalance.batch.key.groups", "storm", "rebalance_batch_key_groups",
        INT, 16, _TOPOLOGY, "Local cluster, key-groups routing: key groups "
        "sr3 rebalance moves in one batch, a batch every other epoch (each "
        "pauses only during its batch).",
        low=1),
    Key("sr3.local.fork.tasks", "storm", "fork_tasks", BOOL, True, _TOPOLOGY,
        "Local cluster: start each Python task by forking one pre-imported "
        "interpreter, a fork server (true), or execute streamparse_run for each, "
        "as Storm's supervisor does (false; about 4x the CPU per start, "
        "bench/task_starts.py)."),
    Key("sr3.idle.quiet.s", "storm", "idle_quiet_s", STORM_SECONDS, 2.0,
        _COMPONENT, "Spouts: how long next must emit nothing before the spout "
        "counts as dry for sr3 run --until-idle (none for a spout that called "
        "end_of_input).", low=0.0,
        accepted="a non-negative number of seconds (a JSON number), "
        "<= 1000000", high=MAX_DURATION_S),
    # output: a component's outputs and errors
    Key("sr3.output.key.fields", "output", "key_fields", NAMES, None, _COMPONENT,
        "Fields keying a sink's output tuples (unset: the stream's first field).",
        accepted="a list of field names or a comma-separated string, as 'word' "
        "or ['word', 'day']", blank=False),
    Key("sr3.on.error", "output", "on_error", TEXT, "fail", _COMPONENT,
        "Spark engine: what a bolt's exception does: fail the query, or divert "
        "the tuple to a dead row.", choices=("fail", "dead-letter")),
    # kafka: the Kafka spout and sink
    Key("sr3.kafka.bootstrap", "kafka", "bootstrap", TEXT, "", Scope.KAFKA,
        "Kafka bootstrap brokers (required by the spout and the sink).",
        accepted="host:port[,host:port]"),
    Key("sr3.kafka.topics", "kafka", "topics", TOPIC_NAMES, (), Scope.KAFKA_SPOUT,
        "Topics the spout reads (or give sr3.kafka.topic.pattern).",
        accepted="a list of names or a comma-separated string"),
    Key("sr3.kafka.topic.pattern", "kafka", "topic_pattern", REGEX, None,
        Scope.KAFKA_SPOUT, "Regular expression matched against whole topic "
        "names, resolved when the spout starts or rewinds.",
        accepted="a regular expression"),
    Key("sr3.kafka.format", "kafka", "record_format", TEXT, "text",
        Scope.KAFKA_SPOUT, "text: one field, the UTF-8 value; json: an object "
        "whose fields are read by name.", choices=("text", "json")),
    Key("sr3.kafka.start", "kafka", "start", TEXT, "earliest", Scope.KAFKA_SPOUT,
        "Where a partition without a recorded offset starts.",
        choices=("earliest", "latest")),
    Key("sr3.kafka.topic.wait.s", "kafka", "topic_wait_s", FLOAT, 0.0,
        Scope.KAFKA_SPOUT, "How long to wait for a missing topic before failing "
        "(0: fail at once, naming it).", low=0.0),
    Key("sr3.kafka.bad.records", "kafka", "bad_records", TEXT, "fail",
        Scope.KAFKA_SPOUT, "fail: the task fails naming the record; dead-letter: "
        "it goes to sr3.kafka.dead.letter.topic.", choices=("fail", "dead-letter")),
    Key("sr3.kafka.dead.letter.topic", "kafka", "dead_letter_topic", TEXT, None,
        Scope.KAFKA_SPOUT, "Where invalid records go, with headers naming the "
        "source and the error (needed by dead-letter).", accepted="a topic name"),
    Key("sr3.kafka.batch.records", "kafka", "batch_records", INT, 500,
        Scope.KAFKA_SPOUT, "Records one next_tuple emits at most.", low=1),
    Key("sr3.kafka.poll.s", "kafka", "poll_s", FLOAT, 0.05, Scope.KAFKA_SPOUT,
        "How long next_tuple waits for records.", low=0.0),
    Key("sr3.kafka.sink.topic", "kafka", "sink_topic", TEXT, "", Scope.KAFKA_SINK,
        "Topic the sink writes results to (required by the sink).",
        accepted="a topic name"),
    Key("sr3.kafka.sink.guarantee", "kafka", "sink_guarantee", TEXT,
        "exactly-once", Scope.KAFKA_SINK, "exactly-once: one Kafka transaction "
        "per committed epoch; at-least-once: no transaction, a crash may write "
        "an epoch again.", choices=("exactly-once", "at-least-once")),
    Key("sr3.kafka.sink.key.field", "kafka", "sink_key_field", TEXT, None,
        Scope.KAFKA_SINK, "Input field whose value is the record key (unset: "
        "records are unkeyed).", accepted="a field name"),
    Key("sr3.kafka.sink.marker.topic", "kafka", "sink_marker_topic", TEXT,
        "_sr3_sink_commits", Scope.KAFKA_SINK, "Compacted topic recording the "
        "last epoch each sink task delivered (created when missing).",
        accepted="a topic name"),
    Key("sr3.kafka.sink.poll.s", "kafka", "sink_poll_s", FLOAT, 0.05,
        Scope.KAFKA_SINK, "How often the committed epoch is read from ZooKeeper.",
        low=0.001),
)
# fmt: on

#: Every ``sr3.*`` configuration key, by name, in table order.
KEYS: Final[Mapping[str, Key]] = {key.name: key for key in _ROWS}
#: The :class:`~sr3.config.Sr3Config` sections, in table order.
SECTIONS: Final = tuple(dict.fromkeys(key.section for key in _ROWS))
#: ``sr3.*`` names that are no config keys (metrics, Kafka headers, state
#: keys, the marker ``sr3 run`` sets on a Storm submit): never reported as
#: unknown keys.
NOT_KEYS: Final = frozenset(
    {
        "sr3.restored",
        "sr3.loaded",
        "sr3.snapshot",
        "sr3.keygroups",
        "sr3.keygroups.table",
        "sr3.waiting",
        "sr3.input.end",
        "sr3.local.cluster",
        "sr3.error",
        "sr3.kafka.out",
        "sr3.kafka.next",
        "sr3.storm.generation.field",
    }
)
_NOT_KEY_PREFIXES: Final = ("sr3.source.",)


def section_keys(section: str) -> tuple[Key, ...]:
    """Return the keys of one :class:`~sr3.config.Sr3Config` section."""
    return tuple(key for key in _ROWS if key.section == section)


def section_values(section: str, conf: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``{attribute: typed value}`` of one section's keys in ``conf``.

    Only that section's keys are read (and checked); unset ones take the
    default.

    Raises:
        ConfigError: a value is not accepted.
    """
    return {key.attr: key.read(conf) for key in section_keys(section)}


def is_config_key(name: str) -> bool:
    """Whether ``name`` is an ``sr3.*`` name a config could mean as a key.

    False for other names and for the ``sr3.*`` names that are not config keys
    (:data:`NOT_KEYS`, Kafka headers ``sr3.source.*``).
    """
    return (
        name.startswith("sr3.")
        and name not in NOT_KEYS
        and not name.startswith(_NOT_KEY_PREFIXES)
    )


def unknown_keys(names: Iterable[str]) -> list[str]:
    """Return the ``sr3.*`` names among ``names`` that set no key, sorted."""
    return sorted(n for n in names if is_config_key(n) and n not in KEYS)


def closest_keys(name: str, n: int = 3) -> list[str]:
    """Return up to ``n`` known keys closest to ``name`` (difflib), best first."""
    return difflib.get_close_matches(name, list(KEYS), n=n)


def unknown_key_message(name: str) -> str:
    """Return what to say of an unknown key: its name and the closest known ones."""
    close = closest_keys(name)
    hint = (
        f"did you mean {' or '.join(close)}?"
        if close
        else "docs/configuration.md lists every key"
    )
    return f"unknown sr3 config key {name!r}; {hint}"


def validate_section(section: object, name: str) -> None:
    """Check every field of a config section against its key's row.

    Raises:
        ConfigError: a field is outside its key's accepted values.
    """
    for key in section_keys(name):
        key.validate(getattr(section, key.attr))


def read_setting(conf: Mapping[str, Any], name: str, *, where: str = "") -> Any:
    """Return key ``name``'s typed, checked value in ``conf`` (default if unset).

    For a module that needs one key of a Storm conf; a caller that needs
    several reads them all with ``Sr3Config.from_mapping(conf, strict=False)``.

    Args:
        conf: A Storm conf (a component's effective conf), Spark conf or dict.
        name: The key, as ``sr3.checkpoint.mode``.
        where: What the conf belongs to, for errors (``component 'count':``).

    Raises:
        KeyError: ``name`` is not in the table.
        ConfigError: the value is not accepted; the message names the key, the
            value and the accepted values.
    """
    return KEYS[name].read(conf, where=where)
