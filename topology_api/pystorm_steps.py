"""``PystormSteps``: pystorm's run loop step by step, for an in-process host.

pystorm's ``Component.run`` does the handshake, then loops on ``_run``; a
``BatchingBolt`` keeps its batches and anchors in private attributes. An
engine that hosts a streamparse component in its own process (the Spark
engine) takes those steps one at a time. They are private in pystorm, so they
are reached here, once each and by attribute (this package imports no
pystorm), and the host calls the public methods below. A change in pystorm's
internals then breaks one module, next to the contract the components
implement (:mod:`topology_api.contract`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["PystormSteps"]


class PystormSteps:
    """Drive one pystorm component (spout or bolt) step by step.

    Args:
        component: The component instance (any pystorm ``Component``; a
            ``BatchingBolt`` for :meth:`take_batches` and :meth:`batch_anchored`).
    """

    def __init__(self, component: Any) -> None:
        self.component = component

    def setup(self, storm_conf: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        """Take the handshake's set-up step (before ``initialize``), as ``run`` does."""
        # pystorm's run() calls it with the handshake's conf and context
        self.component._setup_component(storm_conf, context)  # noqa: SLF001 - pystorm's handshake step

    def source_tuple_types(self) -> Mapping[str, Mapping[str, Any]]:
        """Return source -> stream -> the namedtuple type of its tuples' values.

        (None for a stream whose values stay a plain tuple.) Set by :meth:`setup`.
        """
        types: Mapping[str, Mapping[str, Any]]
        types = self.component._source_tuple_types  # noqa: SLF001 - set up by pystorm's handshake
        return types

    def run_step(self) -> None:
        """Take one step of the run loop: read one command or tuple and act on it."""
        self.component._run()  # noqa: SLF001 - one iteration of pystorm's run loop

    def take_batches(self) -> dict[Any, list[Any]]:
        """Return a ``BatchingBolt``'s pending batches (key -> tuples); forget them."""
        component = self.component
        batches: dict[Any, list[Any]] = component._batches  # noqa: SLF001 - BatchingBolt's batches
        component._batches = defaultdict(list)  # noqa: SLF001 - as BatchingBolt starts one
        return batches

    @contextmanager
    def batch_anchored(self, key: Any, tups: list[Any]) -> Iterator[None]:
        """Anchor a ``BatchingBolt``'s emits to batch ``key``'s ``tups`` meanwhile.

        As ``BatchingBolt.process_batches`` does around ``process_batch``.
        """
        component = self.component
        component._current_tups = tups  # noqa: SLF001 - the anchors of BatchingBolt.emit
        component._current_key = key  # noqa: SLF001 - the batch BatchingBolt.emit is in
        try:
            yield
        finally:
            component._current_tups = []  # noqa: SLF001 - the anchors of BatchingBolt.emit
            component._current_key = None  # noqa: SLF001 - the batch BatchingBolt.emit is in
