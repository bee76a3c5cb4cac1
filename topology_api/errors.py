"""Errors of the engine-neutral topology API: loading and checking a topology.

All derive from :class:`TopologyApiError`, itself an :class:`sr3.errors.SR3Error`;
both engines raise them for a topology file they cannot run.
"""

from __future__ import annotations

from sr3.errors import SR3Error

__all__ = [
    "TopologyApiError",
    "TopologyError",
]


class TopologyApiError(SR3Error):
    """Root of the errors raised by ``topology_api``."""


class TopologyError(TopologyApiError, ValueError):
    """A topology file cannot be loaded or describes an invalid topology."""
