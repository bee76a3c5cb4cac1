"""Frozen, validated configuration: one dataclass per subsystem, composed in Sr3Config.

Values come from dotted ``sr3.*`` keys (Storm conf, Spark conf, config.json) or
``SR3_*`` environment variables, read only at entry points through
:meth:`Sr3Config.from_mapping` and :meth:`Sr3Config.from_env`.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sr3.errors import ConfigError

__all__ = [
    "MECHANISMS",
    "NodeConfig",
    "RecoveryConfig",
    "RepairConfig",
    "RingConfig",
    "Sr3Config",
    "ZkConfig",
    "check_zk_hosts",
    "parse_size",
]

logger = logging.getLogger(__name__)

MECHANISMS = ("star", "line", "tree", "auto")
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
}
#: Sizes are byte counts carried as signed 64-bit integers (msgpack, ZooKeeper).
_MAX_SIZE = 2**63 - 1


def parse_size(text: str | int) -> int:
    """Parse ``200MB``, ``1GiB``, ``4096`` into bytes.

    Raises:
        ConfigError: the text is not a size.
    """
    if isinstance(text, int):
        return text
    raw = text.strip().upper().replace(" ", "")
    digits = raw.rstrip("KMGIB")
    unit = raw[len(digits) :]
    try:
        value = float(digits)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0 or unit not in _SIZE_UNITS:
        msg = f"{text!r} is not a size; write a number and a unit, as 200MB or 1GiB"
        raise ConfigError(msg)
    size = value * _SIZE_UNITS[unit]
    if size > _MAX_SIZE:
        msg = f"{text!r} is too large a size; sizes stop below 8 EiB (2**63 bytes)"
        raise ConfigError(msg)
    return int(size)


def check_zk_hosts(hosts: str) -> str:
    """Return ``hosts`` if it is a ``HOST:PORT[,HOST:PORT]`` list, else raise.

    The port may be left out (ZooKeeper's 2181); an IPv6 host goes in brackets,
    as ``[::1]:2181``; a chroot suffix (``zk1:2181,zk2:2181/app``, as kazoo and
    ZooKeeper's own clients take it) is left to them. An empty string (start an
    embedded server) is accepted.

    Raises:
        ConfigError: an entry has no host, or a port that is not 1..65535.
    """
    servers = hosts.split("/", 1)[0]
    for entry in servers.split(",") if hosts.strip() else ():
        item = entry.strip()
        host, port = item, ""
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else rest
        elif ":" in item:
            host, port = item.split(":", 1)
        ok = (
            bool(host)
            and all(c not in host for c in " /[]")
            and (port == "" or (port.isdigit() and 1 <= int(port) <= 65535))
        )
        if not ok or ":" in port:
            msg = (
                f"ZooKeeper address {item!r} in {hosts!r} is not HOST:PORT; write "
                "sr3.zk.hosts (or --zk) as zk1:2181,zk2:2181 with ports 1..65535"
            )
            raise ConfigError(msg)
    return hosts


def _znode_path(path: str) -> bool:
    """Whether ZooKeeper takes ``path`` (an absolute one) as a znode path."""
    if any(part in ("", ".", "..") for part in path.split("/")[1:]):
        return False
    return not any(
        c <= "\x1f"
        or "\x7f" <= c <= "\x9f"
        or "\ud800" <= c <= "\uf8ff"
        or "\ufff0" <= c <= "\uffff"
        for c in path
    )


def _require(ok: bool, key: str, value: object, hint: str) -> None:
    if not ok:
        msg = f"sr3 config {key}={value!r} is invalid: {hint}"
        raise ConfigError(msg)


#: Longest duration a ``*.s`` key takes (about 11.6 days): ZooKeeper carries a
#: session timeout as int32 milliseconds, and sockets and waits overflow time_t
#: long before inf.
MAX_DURATION_S = 1_000_000.0


def _require_duration(
    value: float, key: str, *, zero_ok: bool = False, note: str = ""
) -> None:
    low = value >= 0 if zero_ok else value > 0
    ok = math.isfinite(value) and low and value <= MAX_DURATION_S
    bound = ">= 0" if zero_ok else "> 0"
    hint = f"use {bound} and <= {MAX_DURATION_S:.0f} seconds{note}"
    _require(ok, key, value, hint)


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
    """

    vnodes: int = 2048
    replication_factor: int = 3
    write_quorum: int = 2
    max_shard_bytes: int = 4 * 1024 * 1024
    key_group_count: int = 256

    def __post_init__(self) -> None:
        _require(
            1 <= self.vnodes <= 4096, "sr3.ring.vnodes", self.vnodes, "use 1..4096"
        )
        _require(
            self.replication_factor >= 1,
            "sr3.ring.replication.factor",
            self.replication_factor,
            "use at least 1",
        )
        _require(
            1 <= self.write_quorum <= self.replication_factor,
            "sr3.ring.write.quorum",
            self.write_quorum,
            "use 1..replication factor",
        )
        _require(
            self.max_shard_bytes >= 1024,
            "sr3.ring.max.shard.bytes",
            self.max_shard_bytes,
            "use at least 1024",
        )
        _require(
            1 <= self.key_group_count <= 32768,
            "sr3.state.key.groups",
            self.key_group_count,
            "use 1..32768",
        )


@dataclass(frozen=True)
class NodeConfig:
    """A ring node's server and the clients that talk to it.

    Attributes:
        secret: Shared secret for the HMAC challenge (default empty: lab only).
        max_frame_bytes: Largest frame accepted on the wire (default 64 MiB).
        io_timeout_s: Socket timeout for a client request (default 30 s).
        connect_timeout_s: Timeout to open a connection (default 3 s).
        chunk_bytes: Chunk size of streaming gets (default 1 MiB).
    """

    secret: str = ""
    max_frame_bytes: int = 64 * 1024 * 1024
    io_timeout_s: float = 30.0
    connect_timeout_s: float = 3.0
    chunk_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        _require(
            self.max_frame_bytes >= 64 * 1024,
            "sr3.node.max.frame.bytes",
            self.max_frame_bytes,
            "use at least 64KiB",
        )
        _require_duration(self.io_timeout_s, "sr3.node.io.timeout.s")
        _require_duration(self.connect_timeout_s, "sr3.node.connect.timeout.s")
        _require(
            4096 <= self.chunk_bytes < self.max_frame_bytes,
            "sr3.node.chunk.bytes",
            self.chunk_bytes,
            "use 4KiB..max frame bytes",
        )


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
    """

    hosts: str = ""
    chroot: str = "/sr3/default"
    session_timeout_s: float = 2.0
    connect_timeout_s: float = 15.0
    digest: str = ""

    def __post_init__(self) -> None:
        check_zk_hosts(self.hosts)
        _require(
            self.chroot.startswith("/") and not self.chroot.endswith("/"),
            "sr3.zk.chroot",
            self.chroot,
            "use an absolute path without a trailing slash, as /sr3/default",
        )
        _require(
            _znode_path(self.chroot),
            "sr3.zk.chroot",
            self.chroot,
            "ZooKeeper refuses this path: use names of letters, digits and "
            "punctuation between single slashes, none of them '.' or '..', as "
            "/sr3/default",
        )
        _require_duration(self.session_timeout_s, "sr3.zk.session.timeout.s")
        _require_duration(self.connect_timeout_s, "sr3.zk.connect.timeout.s")
        _require(
            self.digest == "" or ":" in self.digest,
            "sr3.zk.digest",
            "***",
            "write user:password",
        )


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
    """

    grace_s: float = 0.5
    scan_interval_s: float = 5.0
    parallel_copies: int = 8
    scrub_interval_s: float = 600.0
    orphan_grace_s: float = 3600.0

    def __post_init__(self) -> None:
        _require_duration(self.grace_s, "sr3.repair.grace.s", zero_ok=True)
        _require_duration(self.scan_interval_s, "sr3.repair.scan.interval.s")
        _require(
            self.parallel_copies >= 1,
            "sr3.repair.parallel.copies",
            self.parallel_copies,
            "use >= 1",
        )
        _require_duration(
            self.scrub_interval_s,
            "sr3.repair.scrub.interval.s",
            zero_ok=True,
            note=" (0 disables scrubbing)",
        )
        _require_duration(
            self.orphan_grace_s,
            "sr3.repair.orphan.grace.s",
            zero_ok=True,
            note=" (0 never deletes unnamed replicas)",
        )


@dataclass(frozen=True)
class RecoveryConfig:
    """Snapshot recovery.

    Attributes:
        mechanism: ``star``, ``line``, ``tree`` or ``auto`` (default auto).
        tree_fanout: k of the k-ary tree (default 2).
        max_chain_length: Deltas after which compaction writes a new base (default 8).
        latency_target_s: Optional recovery latency target for the planner.
        lazy_install: Keep key groups encoded until first touched (default True).
    """

    mechanism: str = "auto"
    tree_fanout: int = 2
    max_chain_length: int = 8
    latency_target_s: float | None = None
    lazy_install: bool = True

    def __post_init__(self) -> None:
        _require(
            self.mechanism in MECHANISMS,
            "sr3.recovery.mechanism",
            self.mechanism,
            "use one of star, line, tree, auto",
        )
        _require(
            self.tree_fanout >= 2,
            "sr3.recovery.tree.fanout",
            self.tree_fanout,
            "use >= 2",
        )
        _require(
            self.max_chain_length >= 1,
            "sr3.checkpoint.max.chain.length",
            self.max_chain_length,
            "use >= 1",
        )
        if self.latency_target_s is not None:
            _require_duration(self.latency_target_s, "sr3.recovery.latency.target.s")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    msg = f"{value!r} is not a boolean; write true or false"
    raise ConfigError(msg)


# dotted key -> (section, field, converter)
_KEYS: dict[str, tuple[str, str, Any]] = {
    "sr3.ring.vnodes": ("ring", "vnodes", int),
    "sr3.ring.replication.factor": ("ring", "replication_factor", int),
    "sr3.ring.write.quorum": ("ring", "write_quorum", int),
    "sr3.ring.max.shard.bytes": ("ring", "max_shard_bytes", parse_size),
    "sr3.state.key.groups": ("ring", "key_group_count", int),
    "sr3.node.secret": ("node", "secret", str),
    "sr3.node.max.frame.bytes": ("node", "max_frame_bytes", parse_size),
    "sr3.node.io.timeout.s": ("node", "io_timeout_s", float),
    "sr3.node.connect.timeout.s": ("node", "connect_timeout_s", float),
    "sr3.node.chunk.bytes": ("node", "chunk_bytes", parse_size),
    "sr3.zk.hosts": ("zk", "hosts", str),
    "sr3.zk.chroot": ("zk", "chroot", str),
    "sr3.zk.session.timeout.s": ("zk", "session_timeout_s", float),
    "sr3.zk.connect.timeout.s": ("zk", "connect_timeout_s", float),
    "sr3.zk.digest": ("zk", "digest", str),
    "sr3.repair.grace.s": ("repair", "grace_s", float),
    "sr3.repair.scan.interval.s": ("repair", "scan_interval_s", float),
    "sr3.repair.parallel.copies": ("repair", "parallel_copies", int),
    "sr3.repair.scrub.interval.s": ("repair", "scrub_interval_s", float),
    "sr3.repair.orphan.grace.s": ("repair", "orphan_grace_s", float),
    "sr3.recovery.mechanism": ("recovery", "mechanism", str),
    "sr3.recovery.tree.fanout": ("recovery", "tree_fanout", int),
    "sr3.checkpoint.max.chain.length": ("recovery", "max_chain_length", int),
    "sr3.recovery.latency.target.s": ("recovery", "latency_target_s", float),
    "sr3.recovery.lazy.install": ("recovery", "lazy_install", _to_bool),
}


#: What a key read by ``int`` or ``float`` must be, for error messages.
_WANTED: dict[Any, str] = {int: "a whole number", float: "a number"}
#: ``SR3_*`` variables that are no config keys but are read elsewhere.
_OTHER_VARS = frozenset({"SR3_LAB", "SR3_REQUIRE_ZK", "SR3_TEST_RELAY_FAULTS"})
#: Prefixes of the variables :meth:`Sr3Config.from_env` reads.
_ENV_SECTIONS = tuple(
    sorted({"SR3_" + key.split(".")[1].upper() + "_" for key in _KEYS})
)


def _env_var(key: str) -> str:
    return key.upper().replace(".", "_")


def _unknown_env_vars(env: Mapping[str, str]) -> list[str]:
    """Return ``SR3_<SECTION>_*`` variables that set no key (typos), sorted."""
    known = {_env_var(key) for key in _KEYS} | _OTHER_VARS
    return sorted(
        var for var in env if var.startswith(_ENV_SECTIONS) and var not in known
    )


@dataclass(frozen=True)
class Sr3Config:
    """All of SR3's configuration, one frozen section per subsystem."""

    ring: RingConfig = field(default_factory=RingConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    zk: ZkConfig = field(default_factory=ZkConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)

    @classmethod
    def from_mapping(cls, conf: Mapping[str, Any], *, strict: bool = True) -> Sr3Config:
        """Build from dotted ``sr3.*`` keys (Storm conf, Spark conf, config.json).

        Keys outside ``sr3.`` are ignored. Unknown ``sr3.`` keys are an error when
        ``strict`` (a typo must not silently fall back to a default).

        Raises:
            ConfigError: an unknown ``sr3.`` key or an invalid value.
        """
        updates: dict[str, dict[str, Any]] = {}
        for key, value in conf.items():
            if not key.startswith("sr3."):
                continue
            spec = _KEYS.get(key)
            if spec is None:
                if strict:
                    known = ", ".join(sorted(_KEYS))
                    msg = f"unknown config key {key!r}; known keys: {known}"
                    raise ConfigError(msg)
                continue
            section, name, convert = spec
            try:
                converted = None if value is None else convert(value)
            except (TypeError, ValueError) as exc:
                want = _WANTED.get(convert)
                if want is None:  # parse_size, _to_bool: their message says it
                    msg = f"sr3 config {key}={value!r} could not be read: {exc}"
                else:
                    msg = f"sr3 config {key}={value!r} is not {want}; set {key} to one"
                raise ConfigError(msg) from exc
            updates.setdefault(section, {})[name] = converted
        base = cls()
        parts = {
            f.name: replace(getattr(base, f.name), **updates.get(f.name, {}))
            for f in fields(cls)
        }
        return cls(**parts)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Sr3Config:
        """Build from ``SR3_*`` variables: ``SR3_ZK_HOSTS`` sets ``sr3.zk.hosts``.

        A variable of a config section that sets no key (``SR3_RING_VNODE``, a
        typo) is logged as a warning naming the closest key, and ignored.

        Raises:
            ConfigError: a variable has an invalid value; the message names it.
        """
        env = os.environ if environ is None else environ
        conf: dict[str, Any] = {}
        for key in _KEYS:
            var = _env_var(key)
            if var in env:
                conf[key] = env[var]
        for var in _unknown_env_vars(env):
            near = difflib.get_close_matches(var, [_env_var(k) for k in _KEYS], 1)
            hint = f"did you mean {near[0]}?" if near else "unset it"
            logger.warning(
                "environment variable %s sets no sr3 config key and is ignored; %s",
                var,
                hint,
            )
        try:
            return cls.from_mapping(conf)
        except ConfigError as exc:
            named = [_env_var(k) for k in sorted(conf, key=len) if k in str(exc)]
            if not named:
                raise
            var = named[-1]  # the longest key named: the most specific
            msg = f"{exc} (environment variable {var}={env[var]!r})"
            raise ConfigError(msg) from exc

    @staticmethod
    def known_keys() -> tuple[str, ...]:
        """Return the dotted ``sr3.*`` keys this configuration reads, sorted."""
        return tuple(sorted(_KEYS))

    def to_mapping(self) -> dict[str, Any]:
        """Return the dotted-key form (round-trips through :meth:`from_mapping`)."""
        out: dict[str, Any] = {}
        for key, (section, name, _) in _KEYS.items():
            out[key] = getattr(getattr(self, section), name)
        return out
