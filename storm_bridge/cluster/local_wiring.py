"""Hooks a :class:`~storm_bridge.cluster.local_recovery.LocalRecovery` into the engine.

The engine's flow (deliveries, deaths) and its checkpoint coordinator (cuts,
commits, rollbacks, the epoch hold, the report) call it through hooks, so the
engine itself only calls it where an emit, an ack or a restore passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sr3.config_engine import CheckpointConfig
from storm_bridge.cluster.commits import CheckpointSettings
from storm_bridge.cluster.local_recovery import LocalRecovery
from storm_bridge.cluster.scopes import RecoveryScope

if TYPE_CHECKING:
    from storm_bridge.cluster.engine import Engine

__all__ = ["attach_local_recovery"]


def _chain(
    first: Callable[..., None] | None, then: Callable[..., None]
) -> Callable[..., None]:
    if first is None:
        return then

    def both(*args: Any) -> None:
        first(*args)
        then(*args)

    return both


def attach_local_recovery(
    engine: Engine, checkpoint: CheckpointSettings | None, clock: Callable[[], float]
) -> LocalRecovery | None:
    """Create the engine's :class:`LocalRecovery` and hook it into its flow.

    None without checkpoints (nothing is committed, so nothing is logged).

    Raises:
        ConfigError: ``sr3.recovery.scope`` or ``sr3.recovery.buffer.bytes``
            is invalid.
    """
    coordinator = engine.coordinator
    section = CheckpointConfig.from_mapping(engine.conf)
    if coordinator is None or checkpoint is None:
        return None
    local = LocalRecovery(
        scope=RecoveryScope(section.recovery_scope),
        buffer_bytes=section.recovery_buffer_bytes,
        tasks=engine.tasks,
        component_tasks=engine.router.component_tasks,
        coordinator=coordinator,
        journal=engine.journal,
        timers=engine.timers,
        clock=clock,
        replay_timeout_s=checkpoint.timeout_s,
    )
    coordinator.local_report = local.report
    if local.scope is RecoveryScope.GLOBAL:
        return local  # nothing logged: every failure rolls back globally
    coordinator.on_commit = _chain(coordinator.on_commit, local.committed)
    coordinator.on_rollback = _chain(coordinator.on_rollback, local.reset)
    held = coordinator.holds_epochs
    coordinator.holds_epochs = lambda: local.holding() or bool(held and held())
    coordinator.barrier_sent_hook(local.input_cut)
    coordinator.barrier_forward_hook(local.output_cut)
    flow = engine.flow
    flow.on_delivered = _chain(flow.on_delivered, local.delivered)
    flow.intercept = local.intercept
    flow.keeps_inputs = local.dropping
    return local
