"""The planner: which structure recovers a snapshot fastest, and why.

:func:`plan_mechanism` is a pure function of :class:`PlannerInputs`, so it is
deterministic and unit-tested. It predicts each structure's time with a simple
cost model and picks the fastest, or, with a latency target, the structure that
meets it with the least load on R (line, then tree, then star: one stream beats
many, as SR3's own selection prefers line when latency allows). The model:

* star: one round trip per shard per worker, plus the state over R's inbound
  link with every holder sending at once (the measured aggregate rate);
* line: a round trip per hop to set the chain up, plus the state over one
  stream (the slower of a single holder's rate and a node's relay rate);
* tree: a round trip per level, plus the *merged* state over one stream, plus
  the CPU of folding the delta chain (decoding at ``merge_bps``) when the chain
  has deltas.

Line and tree include only the holders that cover every shard
(``relay_holders``, :func:`~sr3.recovery.base.covering_holders`), so their hop
counts and tree depth come from that count, not from every live holder.

:class:`Prober` measures the inputs: a ping's round trip and a timed small read
(``relay_probe``) from each holder alone and from all of them at once, cached per
holder for ``ttl_s``.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sr3.client import ClientPool
from sr3.config import NodeConfig
from sr3.errors import ConfigError, StorageError
from sr3.ports import NodeInfo
from sr3.recovery.transport import RelayStream

__all__ = [
    "DEFAULT_MERGE_BPS",
    "DEFAULT_RELAY_BPS",
    "SMALL_STATE_BYTES",
    "PlanDecision",
    "PlannerInputs",
    "ProbeResult",
    "Prober",
    "plan_mechanism",
]

#: Bytes/s a node folds key-group blobs at (msgpack in C: ~0.5 GB/s for 100-byte
#: values, ~2 GB/s for 1 KiB values, measured on the 2-core bench machine).
DEFAULT_MERGE_BPS = 400e6
#: Bytes/s one node forwards a relay stream at (receive a frame, forward its
#: bytes unchanged; about what line recovery reached end to end on loopback, 1 GB
#: over a chain of 3 of 5 holders on the 2-core bench machine).
DEFAULT_RELAY_BPS = 500e6
#: Below this, round trips dominate and star is always chosen.
SMALL_STATE_BYTES = 1024 * 1024
_STRUCTURES = ("star", "line", "tree")
_GENTLEST_FIRST = ("line", "tree", "star")


@dataclass(frozen=True)
class PlannerInputs:
    """Everything the planner looks at.

    Attributes:
        state_bytes: Bytes of every shard of the chain (what star and line move).
        merged_bytes: Estimated bytes once deltas are folded (what tree moves).
        shard_count: Shards in the chain.
        holder_count: Live holders the shards can come from.
        relay_holders: Holders line and tree include: the few that cover every
            shard (:func:`~sr3.recovery.base.covering_holders`); None means
            ``holder_count``.
        chain_length: Epochs in the chain (1 = a base only).
        rtt_s: Round trip from R to a holder (median of the probes).
        holder_bps: Bytes/s of one holder streaming to R alone.
        aggregate_bps: Bytes/s of all holders streaming to R at once (R's inbound
            limit); None means ``holder_bps * holder_count``.
        latency_target_s: Optional target for the recovery's duration.
        configured: ``sr3.recovery.mechanism``: star, line, tree or auto.
        tree_fanout: k of the tree.
        parallel: Shards star fetches at once.
        merge_bps: Bytes/s a node folds blobs at.
        relay_bps: Bytes/s a node relays at.
        probed: Whether the rates were measured (else defaults).
    """

    state_bytes: int
    merged_bytes: int
    shard_count: int
    holder_count: int
    chain_length: int
    relay_holders: int | None = None
    rtt_s: float = 0.0002
    holder_bps: float = 1e9
    aggregate_bps: float | None = None
    latency_target_s: float | None = None
    configured: str = "auto"
    tree_fanout: int = 2
    parallel: int = 8
    merge_bps: float = DEFAULT_MERGE_BPS
    relay_bps: float = DEFAULT_RELAY_BPS
    probed: bool = False

    def __post_init__(self) -> None:
        if self.configured not in (*_STRUCTURES, "auto"):
            msg = (
                f"recovery mechanism {self.configured!r} is unknown; set "
                "sr3.recovery.mechanism to star, line, tree or auto"
            )
            raise ConfigError(msg)
        if self.relay_holders is not None and self.relay_holders < 1:
            msg = f"relay_holders must be at least 1, got {self.relay_holders}"
            raise ConfigError(msg)
        if self.holder_bps <= 0 or self.merge_bps <= 0 or self.relay_bps <= 0:
            msg = "planner rates must be positive bytes per second"
            raise ConfigError(msg)


@dataclass(frozen=True)
class PlanDecision:
    """The planner's choice.

    Attributes:
        mechanism: star, line or tree.
        reason: Why, in one line (logged and reported).
        predicted_s: Predicted seconds per structure (empty when configured).
    """

    mechanism: str
    reason: str
    predicted_s: Mapping[str, float] = field(default_factory=dict)


def _predict(p: PlannerInputs) -> dict[str, float]:
    n = max(1, p.holder_count)
    relays = max(1, min(n, p.relay_holders or n))
    # all holders at once never deliver less than one alone: a lower aggregate
    # probe is the prober's own overhead (threads in R), not the network
    aggregate = max(p.aggregate_bps or p.holder_bps * n, p.holder_bps)
    one_stream = min(p.holder_bps, p.relay_bps)
    waves = math.ceil(max(1, p.shard_count) / max(1, min(p.parallel, p.shard_count)))
    depth = 1
    while (p.tree_fanout ** (depth) - 1) // (p.tree_fanout - 1) < relays:
        depth += 1
    merge_s = 0.0
    if p.chain_length > 1:
        merge_s = (p.state_bytes + p.merged_bytes) / 2 / p.merge_bps
    return {
        "star": 2 * p.rtt_s + waves * p.rtt_s + p.state_bytes / aggregate,
        "line": 3 * relays * p.rtt_s + p.state_bytes / one_stream,
        "tree": 3 * depth * p.rtt_s + p.merged_bytes / one_stream + merge_s,
    }


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def plan_mechanism(inputs: PlannerInputs) -> PlanDecision:
    """Choose star, line or tree for a recovery (pure and deterministic).

    Returns:
        The structure and the reason for it.
    """
    p = inputs
    if p.configured != "auto":
        return PlanDecision(
            p.configured, f"configured: sr3.recovery.mechanism={p.configured}"
        )
    facts = (
        f"{_fmt_bytes(p.state_bytes)} in {p.chain_length} epoch(s) "
        f"(~{_fmt_bytes(p.merged_bytes)} merged), {p.shard_count} shards over "
        f"{p.holder_count} holders"
        + (
            f" ({p.relay_holders} cover all)"
            if p.relay_holders is not None and p.relay_holders < p.holder_count
            else ""
        )
    )
    if p.holder_count <= 1:
        return PlanDecision("star", f"auto: star, one holder only; {facts}")
    if p.state_bytes <= SMALL_STATE_BYTES:
        return PlanDecision("star", f"auto: star, small state; {facts}")
    predicted = _predict(p)
    shown = ", ".join(f"{m} {predicted[m]:.3g}s" for m in _STRUCTURES)
    rates = (
        f"rtt {p.rtt_s * 1e3:.2g} ms, {_fmt_bytes(p.holder_bps)}/s per holder"
        + (f", {_fmt_bytes(p.aggregate_bps)}/s all at once" if p.aggregate_bps else "")
        + ("" if p.probed else " (defaults, not probed)")
    )
    fastest = min(_STRUCTURES, key=lambda m: (predicted[m], _STRUCTURES.index(m)))
    target = p.latency_target_s
    if target is not None:
        meeting = [m for m in _GENTLEST_FIRST if predicted[m] <= target]
        if meeting:
            choice = meeting[0]
            why = f"{choice} meets the {target:g}s target with the least load on R"
        else:
            choice = fastest
            why = f"none meets the {target:g}s target; {choice} is fastest"
    else:
        choice = fastest
        why = f"{choice} is predicted fastest"
    reason = f"auto: {why} ({shown}); {facts}; {rates}"
    return PlanDecision(choice, reason, predicted)


@dataclass(frozen=True)
class ProbeResult:
    """Measured paths from R to holders.

    Attributes:
        rtt_s: Ping round trip per node id.
        bps: Bytes/s of a timed read per node id, alone.
        aggregate_bps: Bytes/s of the same read from every node at once.
        seconds: Time the probing took (0 when served from the cache).
    """

    rtt_s: Mapping[str, float]
    bps: Mapping[str, float]
    aggregate_bps: float | None
    seconds: float = 0.0

    def median_rtt_s(self) -> float:
        """Median round trip (0.2 ms when nothing was measured)."""
        return statistics.median(self.rtt_s.values()) if self.rtt_s else 0.0002

    def median_bps(self) -> float:
        """Median single-holder rate (1 GB/s when nothing was measured)."""
        return statistics.median(self.bps.values()) if self.bps else 1e9


class Prober:
    """Measures round trip and read rate to holders, cached per node for ``ttl_s``.

    Args:
        pool: Client connections (for pings).
        config: Secret and timeouts (for probe reads).
        probe_bytes: Size of the timed read per holder (default 1 MiB).
        ttl_s: How long a measurement is reused (default 60 s).
        clock: Monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        pool: ClientPool,
        config: NodeConfig,
        *,
        probe_bytes: int = 1024 * 1024,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._config = config
        self._probe_bytes = probe_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[tuple[str, int], tuple[float, float, float]] = {}
        self._aggregate: dict[frozenset[tuple[str, int]], tuple[float, float]] = {}

    def measure(self, nodes: Mapping[str, NodeInfo]) -> ProbeResult:
        """Return round trips and rates to ``nodes``; unreachable ones are left out."""
        started = self._clock()
        now = started
        rtt: dict[str, float] = {}
        bps: dict[str, float] = {}
        for node_id, info in sorted(nodes.items()):
            key = (info.host, info.port)
            cached = self._cache.get(key)
            if cached is None or now - cached[0] > self._ttl_s:
                try:
                    cached = (now, *self._probe_one(info))
                except StorageError:
                    continue
                self._cache[key] = cached
            rtt[node_id], bps[node_id] = cached[1], cached[2]
        group = frozenset((nodes[n].host, nodes[n].port) for n in rtt)
        agg = self._aggregate.get(group)
        if group and (agg is None or now - agg[0] > self._ttl_s):
            agg = (now, self._probe_all([nodes[n] for n in sorted(rtt)]))
            self._aggregate[group] = agg
        return ProbeResult(
            rtt, bps, None if agg is None else agg[1], self._clock() - started
        )

    def _probe_one(self, info: NodeInfo) -> tuple[float, float]:
        with self._pool.client(info) as client:
            client.ping()  # warm: connect and authenticate outside the timing
            t0 = time.perf_counter()
            client.ping()
            rtt = time.perf_counter() - t0
        seconds = self._timed_read(info)
        return rtt, self._probe_bytes / max(seconds - rtt, 1e-6)

    def _stream(self, info: NodeInfo) -> RelayStream:
        request = {"op": "relay_probe", "bytes": self._probe_bytes}
        stream = RelayStream(info.host, info.port, request, config=self._config)
        stream.connect()
        return stream

    def _timed_read(self, info: NodeInfo) -> float:
        stream = self._stream(info)
        try:
            t0 = time.perf_counter()
            stream.send_request()
            for _ in stream.frames():
                pass
            return time.perf_counter() - t0
        finally:
            stream.close()

    def _probe_all(self, infos: list[NodeInfo]) -> float:
        """Read from every node at once, connected beforehand; return bytes/s."""
        streams: list[RelayStream] = []
        try:
            for info in infos:
                try:
                    streams.append(self._stream(info))
                except StorageError:
                    continue
            if not streams:
                return 0.0
            start = threading.Barrier(len(streams) + 1)
            with ThreadPoolExecutor(len(streams)) as pool:
                futures = [pool.submit(_read_after, s, start) for s in streams]
                start.wait()
                t0 = time.perf_counter()
                done = sum(f.result() for f in futures)
                seconds = time.perf_counter() - t0
        finally:
            for stream in streams:
                stream.close()
        return self._probe_bytes * done / max(seconds, 1e-6)


def _read_after(stream: RelayStream, start: threading.Barrier) -> int:
    start.wait()
    try:
        stream.send_request()
        for _ in stream.frames():
            pass
    except StorageError:
        return 0
    return 1
