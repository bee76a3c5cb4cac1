"""Errors raised by the Spark bridge: compiling a topology and running its components.

All derive from :class:`SparkBridgeError`, itself an :class:`sr3.errors.SR3Error`.
Errors about a running component name the component, the Spark partition, the
micro-batch id and, for stateful bolts, the key, so the failing tuple can be found.
"""

from __future__ import annotations

from sr3.errors import SR3Error

__all__ = [
    "BatchLimitError",
    "ComponentError",
    "QueryFailedError",
    "QueryPausedError",
    "ReplayError",
    "SparkBridgeError",
    "UnsupportedTopologyError",
]


class SparkBridgeError(SR3Error):
    """Root of the errors raised by ``spark_bridge``."""


class UnsupportedTopologyError(SparkBridgeError, ValueError):
    """The topology uses a shape or grouping this cut of the bridge cannot compile."""


class ComponentError(SparkBridgeError):
    """A spout or bolt misbehaved while Spark ran it (raised, or broke the contract)."""


class ReplayError(ComponentError):
    """A replayable spout did not reproduce the tuples of an offset range."""


class QueryFailedError(SparkBridgeError):
    """The Structured Streaming query stopped with an error."""


class BatchLimitError(SparkBridgeError):
    """A micro-batch started after the run's last one (``--max-batches``); not run.

    Raised by the sink before it writes or commits anything, so the batch is
    neither in the ring nor in Spark's commit log: the next run reads it again.
    """


class QueryPausedError(SparkBridgeError):
    """A micro-batch started after the run paused its query (a rebalance); not run.

    Raised by the sink before it writes or commits anything: the query that
    follows (at the new task counts) reads the batch's tuples again from the
    committed epoch.
    """
