"""A replayable spout hosted in-process: driven by ``seek`` and ``next_tuple``.

The Spark data source (:mod:`spark_bridge.source`) plans micro-batches with one
:class:`SpoutHost` per spout task on the driver and replays them with others on
executors; see :mod:`spark_bridge.hosting` for how a component is hosted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from spark_bridge.errors import ComponentError
from spark_bridge.hosting import DEFAULT_STREAM, Emit, Host
from spark_bridge.worker import spark_task
from topology_api.topology import LoadedTopology

__all__ = ["SpoutHost"]


class SpoutHost(Host):
    """A replayable spout driven by ``seek`` and ``next_tuple``.

    An emit with a message id (``tup_id``) is acked by :meth:`ack_through`
    once its micro-batch committed; ``fail`` is never called (a failing batch
    fails the query, see ``sr3.on.error``).

    Attributes:
        position: Offset of the last emit (after a seek: the sought offset).
    """

    def __init__(
        self,
        topology: LoadedTopology,
        component: str,
        index: int,
        overrides: Mapping[str, Any],
    ) -> None:
        super().__init__(topology, component, index, overrides)
        self.instance.emit = self._emit
        self.position: Any = None
        self.sought = False
        #: (offset, message id) of emits given a message id, since the seek
        self.tracked: list[tuple[Any, Any]] = []
        self._seed: str | None = None

    def _emit(
        self,
        tup: Any,
        offset: Any = None,
        tup_id: Any = None,
        stream: Any = None,
        direct_task: Any = None,
        need_task_ids: bool = False,
    ) -> Any:
        self._direct(direct_task)
        if offset is None:
            msg = (
                f"spout {self.component!r} task {self.index} emitted {tup!r} without "
                "an offset; emit with self.emit(values, offset=n) so Spark can replay"
            )
            raise ComponentError(msg)
        stream_id = str(stream or DEFAULT_STREAM)
        self._check_emit(stream_id, tup)
        position = self._json(offset)
        if tup_id is not None:
            self.tracked.append((position, tup_id))
        if need_task_ids:
            seed = json.dumps(position, sort_keys=True)
            if seed != self._seed:
                self.router.reseed(seed)
                self._seed = seed
        try:
            return self._captured(stream_id, tup, position, need_task_ids=need_task_ids)
        except UnicodeDecodeError as exc:
            msg = (
                f"spout {self.component!r} task {self.index} emitted {tup!r} at "
                f"offset {offset!r}: {exc}; Storm's JSON multilang drops such an "
                "emit, which Spark cannot replay: emit str, not bytes that are "
                "not UTF-8"
            )
            raise ComponentError(msg) from exc

    def _json(self, offset: Any) -> Any:
        """Return ``offset`` as Spark's JSON offset log gives it back.

        A tuple offset comes back as a list (and a dict's int keys as strings),
        so replays compare the offsets they reach in that form.

        Raises:
            ComponentError: the offset is not JSON-able.
        """
        if isinstance(offset, int | float | str):
            return offset
        try:
            return json.loads(json.dumps(offset))
        except (TypeError, ValueError) as exc:
            msg = (
                f"spout {self.component!r} task {self.index} emitted offset "
                f"{offset!r}, which Spark cannot keep in its JSON offset log "
                f"({exc}); use numbers, strings, lists or dicts of them"
            )
            raise ComponentError(msg) from exc

    def seek(self, offset: Any) -> None:
        """Seek the spout so its next emit follows ``offset`` (None: the start).

        Raises:
            ComponentError: the spout's ``seek`` raised.
        """
        self._call("seek", self.instance.seek, offset)
        self.position = offset
        self.sought = True
        self.tracked.clear()

    def _call(self, name: str, method: Callable[..., Any], *args: Any) -> None:
        try:
            method(*args)
        except ComponentError:
            raise
        except Exception as exc:
            _index, batch = spark_task()
            msg = (
                f"spout {self.component!r} task {self.index} raised in {name}() "
                f"at offset {self.position!r} (batch {batch}): "
                f"{type(exc).__name__}: {exc}; fix {name}() and restart the query "
                "from the same checkpoint"
            )
            raise ComponentError(msg) from exc

    def ack_through(self, offset: Any) -> list[Any]:
        """Call the spout's ``ack`` for the message ids emitted up to ``offset``.

        Storm acks a spout tuple emitted with a message id once its tuple tree
        completes; on Spark its micro-batch's commit is that moment. Returns
        the acked ids (none when ``offset`` was not emitted since the seek).

        Raises:
            Exception: whatever the spout's ``ack`` raised.
        """
        last = max(
            (i for i, (at, _id) in enumerate(self.tracked) if at == offset),
            default=-1,
        )
        acked = [tup_id for _at, tup_id in self.tracked[: last + 1]]
        del self.tracked[: last + 1]
        for tup_id in acked:
            self.instance.ack(tup_id)
        return acked

    def step(self) -> list[Emit]:
        """Call ``next_tuple`` once; return its emits and advance :attr:`position`.

        Raises:
            ComponentError: ``next_tuple`` raised (or emitted what Spark cannot
                carry).
        """
        self.emits = []
        self._call("next_tuple", self.instance.next_tuple)
        emitted, self.emits = self.emits, []
        if emitted:
            self.position = emitted[-1].offset
        return emitted
