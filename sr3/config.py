"""Frozen, validated configuration: one dataclass per subsystem, composed in Sr3Config.

Values come from dotted ``sr3.*`` keys (Storm conf, Spark conf, config.json) or
``SR3_*`` environment variables, read only at entry points through
:meth:`Sr3Config.from_mapping` and :meth:`Sr3Config.from_env`. Every key's type,
default, accepted values and doc are one row of :data:`sr3.config_table.KEYS`,
which validates them all alike; ``docs/configuration.md`` is generated from it.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sr3.config_engine import (
    CheckpointConfig,
    KafkaConfig,
    MetricsConfig,
    OutputConfig,
    StormConfig,
)
from sr3.config_keys import Key, Scope
from sr3.config_table import (
    KEYS,
    MECHANISMS,
    SECTIONS,
    read_setting,
    section_keys,
    unknown_key_message,
    unknown_keys,
    validate_section,
)
from sr3.config_values import MAX_DURATION_S, check_zk_hosts, parse_size
from sr3.errors import ConfigError

__all__ = [
    "KEYS",
    "MAX_DURATION_S",
    "MECHANISMS",
    "CheckpointConfig",
    "KafkaConfig",
    "Key",
    "MetricsConfig",
    "NodeConfig",
    "OutputConfig",
    "RecoveryConfig",
    "RepairConfig",
    "RingConfig",
    "Scope",
    "Sr3Config",
    "StormConfig",
    "ZkConfig",
    "check_zk_hosts",
    "parse_size",
    "read_setting",
]

logger = logging.getLogger(__name__)


_QUORUM_KEY: Final = "sr3.ring.write.quorum"
_CHUNK_KEY: Final = "sr3.node.chunk.bytes"


def _out_of_range(name: str, value: object) -> ConfigError:
    return KEYS[name].error(value, "is out of range")


@dataclass(frozen=True)
class RingConfig:
    """Placement on the hash ring.

    Attributes:
        vnodes: Virtual nodes per unit of node capacity (default 2048: keeps
            primary placement within 10% of fair share over 8 nodes).
        replication_factor: r, replicas per shard on distinct nodes (default 3).
        write_quorum: Replicas that must acknowledge a write (default 2).
        max_shard_bytes: Upper bound of a shard's payload (default 4 MiB).
        key_group_count: G for new owners (default 256); recorded on first epoch.

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    vnodes: int = 2048
    replication_factor: int = 3
    write_quorum: int = 2
    max_shard_bytes: int = 4 * 1024 * 1024
    key_group_count: int = 256

    def __post_init__(self) -> None:
        validate_section(self, "ring")
        if self.write_quorum > self.replication_factor:
            raise _out_of_range(_QUORUM_KEY, self.write_quorum)


@dataclass(frozen=True)
class NodeConfig:
    """A ring node's server and the clients that talk to it.

    Attributes:
        secret: Shared secret for the HMAC challenge (default empty: lab only).
        max_frame_bytes: Largest frame accepted on the wire (default 64 MiB).
        io_timeout_s: Socket timeout for a client request (default 30 s).
        connect_timeout_s: Timeout to open a connection (default 3 s).
        chunk_bytes: Chunk size of streaming gets (default 1 MiB).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    secret: str = ""
    max_frame_bytes: int = 64 * 1024 * 1024
    io_timeout_s: float = 30.0
    connect_timeout_s: float = 3.0
    chunk_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        validate_section(self, "node")
        if self.chunk_bytes >= self.max_frame_bytes:
            raise _out_of_range(_CHUNK_KEY, self.chunk_bytes)


@dataclass(frozen=True)
class ZkConfig:
    """ZooKeeper coordination.

    Attributes:
        hosts: ``host:port[,host:port]``; empty means start an embedded server.
        chroot: Root of this cluster's znodes (default ``/sr3/default``).
        session_timeout_s: Requested session timeout; bounds failure detection
            (default 2 s; the server clamps it to 2..20 tickTimes).
        connect_timeout_s: Time to wait for the first session (default 15 s).
        digest: Optional ``user:password`` for digest ACLs on every znode created.

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    hosts: str = ""
    chroot: str = "/sr3/default"
    session_timeout_s: float = 2.0
    connect_timeout_s: float = 15.0
    digest: str = ""

    def __post_init__(self) -> None:
        check_zk_hosts(self.hosts)
        validate_section(self, "zk")


@dataclass(frozen=True)
class RepairConfig:
    """Re-replication by the elected coordinator.

    Attributes:
        grace_s: Wait after a membership change before repairing, so a node that
            reconnects at once causes no copies (default 0.5 s).
        scan_interval_s: Periodic full reconcile, catching anything missed
            (default 5 s).
        parallel_copies: Copies in flight at once (default 8).
        scrub_interval_s: Each node re-reads every replica it holds this often,
            quarantining any that fails its checksum so repair replaces it
            (default 600 s; 0 disables scrubbing).
        orphan_grace_s: A replica no shard record names (left by a writer that
            died before publishing its manifest) is deleted once the coordinator
            has seen it unnamed for this long (default 3600 s; 0 never deletes).

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    grace_s: float = 0.5
    scan_interval_s: float = 5.0
    parallel_copies: int = 8
    scrub_interval_s: float = 600.0
    orphan_grace_s: float = 3600.0

    def __post_init__(self) -> None:
        validate_section(self, "repair")


@dataclass(frozen=True)
class RecoveryConfig:
    """Snapshot recovery.

    Attributes:
        mechanism: ``star``, ``line``, ``tree`` or ``auto`` (default auto);
            ``sr3.recovery.mechanism``, read per stateful bolt.
        tree_fanout: k of the k-ary tree (default 2).
        max_chain_length: Deltas after which compaction writes a new base
            (default 8); ``sr3.checkpoint.max.chain.length``, per stateful bolt.
        latency_target_s: Optional recovery latency target for the planner.
        lazy_install: Keep key groups encoded until first touched (default True).
        lazy: A restored stateful task processes before its state arrived,
            fetching key groups on demand (default True); ``sr3.recovery.lazy``.

    Raises:
        ConfigError: a value is outside its key's accepted values.
    """

    mechanism: str = "auto"
    tree_fanout: int = 2
    max_chain_length: int = 8
    latency_target_s: float | None = None
    lazy_install: bool = True
    lazy: bool = True

    def __post_init__(self) -> None:
        validate_section(self, "recovery")


#: ``SR3_*`` variables that are no config keys but are read elsewhere.
_OTHER_VARS: Final = frozenset({"SR3_LAB", "SR3_REQUIRE_ZK", "SR3_TEST_RELAY_FAULTS"})
#: The keys :meth:`Sr3Config.from_env` reads (the cluster's, as before).
_ENV_KEYS: Final = tuple(key for key in KEYS.values() if key.env)
#: Prefixes of the variables :meth:`Sr3Config.from_env` reads.
_ENV_SECTIONS: Final = tuple(
    sorted({"SR3_" + key.name.split(".")[1].upper() + "_" for key in _ENV_KEYS})
)


def _unknown_env_vars(env: Mapping[str, str]) -> list[str]:
    """Return ``SR3_<SECTION>_*`` variables that set no key (typos), sorted."""
    known = {key.env_var for key in _ENV_KEYS} | _OTHER_VARS
    return sorted(
        var for var in env if var.startswith(_ENV_SECTIONS) and var not in known
    )


@dataclass(frozen=True)
class Sr3Config:
    """All of SR3's configuration, one frozen section per subsystem.

    A component's effective settings come from its merged Storm conf (the
    topology conf, then ``sr3 run -o`` overrides, then the component's own
    config): ``Sr3Config.merged(topology_conf, overrides, component_conf)``,
    or ``Sr3Config.from_mapping(merged_conf, strict=False)`` for a conf Storm
    already merged (a task's ``storm_conf``). For example
    ``.checkpoint.rollback_quiet_s``, ``.ring.key_group_count``
    (``sr3.state.key.groups``) and ``.recovery.max_chain_length``
    (``sr3.checkpoint.max.chain.length``).
    """

    ring: RingConfig = field(default_factory=RingConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    zk: ZkConfig = field(default_factory=ZkConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    storm: StormConfig = field(default_factory=StormConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    @classmethod
    def from_mapping(cls, conf: Mapping[str, Any], *, strict: bool = True) -> Sr3Config:
        """Build from dotted ``sr3.*`` keys (Storm conf, Spark conf, config.json).

        Keys outside ``sr3.`` are ignored, and so are the ``sr3.*`` names that
        are no keys (metric names, Kafka headers). An unknown ``sr3.`` key (a
        typo must not silently fall back to a default) is an error naming the
        closest known keys when ``strict``; otherwise it is logged as a warning
        and ignored, as for a whole Storm conf whose other keys other modules
        read. Unset keys, ``null`` and ``""`` take the default.

        Raises:
            ConfigError: an unknown ``sr3.`` key (when ``strict``) or an invalid
                value; the message names the key, the value and the accepted
                values.
        """
        unknown = unknown_keys(conf)
        if unknown and strict:
            raise ConfigError(unknown_key_message(unknown[0]))
        for name in unknown:
            logger.warning("%s; it is ignored", unknown_key_message(name))
        parts = {
            section: _SECTION_TYPES[section](
                **{
                    key.attr: key.parse(conf[key.name])
                    for key in section_keys(section)
                    if key.name in conf
                }
            )
            for section in SECTIONS
        }
        return cls(**parts)

    @classmethod
    def merged(cls, *confs: Mapping[str, Any], strict: bool = False) -> Sr3Config:
        """Build from confs merged left to right (a later one's keys win).

        Pass a component's layers in Storm's order: the topology conf, the run's
        overrides, then the component's own config. Not ``strict`` by default,
        as a Storm conf holds the keys of every module.

        Raises:
            ConfigError: as :meth:`from_mapping`.
        """
        conf: dict[str, Any] = {}
        for layer in confs:
            conf.update(layer)
        return cls.from_mapping(conf, strict=strict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Sr3Config:
        """Build from ``SR3_*`` variables: ``SR3_ZK_HOSTS`` sets ``sr3.zk.hosts``.

        Only the keys of the cluster sections (ring, node, zk, repair, recovery)
        are read. A variable of such a section that sets no key
        (``SR3_RING_VNODE``, a typo) is logged as a warning naming the closest
        key, and ignored.

        Raises:
            ConfigError: a variable has an invalid value; the message names it.
        """
        env = os.environ if environ is None else environ
        conf: dict[str, Any] = {}
        for key in _ENV_KEYS:
            if key.env_var in env:
                conf[key.name] = env[key.env_var]
        for var in _unknown_env_vars(env):
            near = difflib.get_close_matches(var, [k.env_var for k in _ENV_KEYS], 1)
            hint = f"did you mean {near[0]}?" if near else "unset it"
            logger.warning(
                "environment variable %s sets no sr3 config key and is ignored; %s",
                var,
                hint,
            )
        try:
            return cls.from_mapping(conf)
        except ConfigError as exc:
            named = [KEYS[k].env_var for k in sorted(conf, key=len) if k in str(exc)]
            if not named:
                raise
            var = named[-1]  # the longest key named: the most specific
            msg = f"{exc} (environment variable {var}={env[var]!r})"
            raise ConfigError(msg) from exc

    @staticmethod
    def known_keys() -> tuple[str, ...]:
        """Return every dotted ``sr3.*`` config key, sorted."""
        return tuple(sorted(KEYS))

    def to_mapping(self) -> dict[str, Any]:
        """Return the dotted-key form (round-trips through :meth:`from_mapping`)."""
        return {
            key.name: getattr(getattr(self, key.section), key.attr)
            for key in KEYS.values()
        }

    @staticmethod
    def key(name: str) -> Key:
        """Return the table row of key ``name`` (type, default, accepted values).

        Raises:
            ConfigError: no such key; the message names the closest ones.
        """
        row = KEYS.get(name)
        if row is None:
            raise ConfigError(unknown_key_message(name))
        return row


_SECTION_TYPES: Final[Mapping[str, Any]] = {
    "ring": RingConfig,
    "node": NodeConfig,
    "zk": ZkConfig,
    "repair": RepairConfig,
    "recovery": RecoveryConfig,
    "checkpoint": CheckpointConfig,
    "storm": StormConfig,
    "output": OutputConfig,
    "kafka": KafkaConfig,
    "metrics": MetricsConfig,
}
