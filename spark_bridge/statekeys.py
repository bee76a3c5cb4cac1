"""State keys of a stateful bolt that overrides ``state_key``, and their routes.

On Storm a fields grouping sends a tuple to the task its grouping values hash
to, and the bolt keys its state by ``state_key(tup)``: by default those same
values. A bolt that overrides ``state_key`` (``(user, page)`` behind
``fields("user")``) stores each key's *route* with its fields
(:data:`sr3.key_state.ROUTE_FIELD`: ``route_hash`` of the grouping values), so a
rescale puts the key on the task its tuples go to
(:func:`topology_api.java_hash.key_task_index`). On Spark:

- the keying stage (:class:`spark_bridge.keying.KeyStage`) groups such a
  bolt's input by the encoded state key, which the bolt's own ``state_key``
  computes on a hosted instance of the task the tuple goes to
  (:meth:`StateKeys.group_key`);
- the stateful stage (:mod:`spark_bridge.keyed`) hosts the key on the task of
  its route and stores the route with the key's fields (:meth:`StateKeys.route`).

A bolt keyed by its grouping values stores no route and takes none of these
steps. One state key must stay on one task: Storm would keep one state per
task for a key whose tuples go to several tasks, Spark one state per key, so
the stateful stage refuses such a key.
"""

from __future__ import annotations

from typing import Any, Final

from spark_bridge.errors import ComponentError
from spark_bridge.hosting import BoltHost
from spark_bridge.rows import DEAD, ComponentRef, Row
from spark_bridge.worker import spark_task, topology_of
from sr3.codec import decode_value, encode_key, encode_value
from sr3.errors import CodecError
from topology_api.java_hash import IntegerBoxing, key_task_index, route_hash

__all__ = ["StateKeys"]

#: Conf key choosing what a bolt's exception does (``spark_bridge.stages``'s).
_ON_ERROR_KEY: Final = "sr3.on.error"


class StateKeys:
    """The state keys and routes of one stateful bolt's input tuples.

    Picklable plain data: the bolt instances it hosts to call ``state_key``
    stay in the Python worker that hosted them.

    Args:
        ref: The stateful bolt.
        on_error: ``sr3.on.error`` of the bolt (``fail`` or ``dead-letter``).
    """

    def __init__(self, ref: ComponentRef, *, on_error: str = "fail") -> None:
        topology = topology_of(ref)
        info = topology.components[ref.component]
        self.ref = ref
        self.on_error = on_error
        #: (source, stream) -> names of the fields-grouping fields
        self.names = {
            (sub.source, sub.stream): tuple(sub.grouping.fields) for sub in info.inputs
        }
        #: (source, stream) -> indexes of the fields-grouping values
        self.fields = {
            (sub.source, sub.stream): tuple(
                topology.components[sub.source].outputs[sub.stream].fields.index(f)
                for f in sub.grouping.fields
            )
            for sub in info.inputs
        }
        self.tasks = info.tasks
        #: how Storm's router hashes int values (``sr3.storm.json.integer.boxing``)
        self.boxing = IntegerBoxing.of({**topology.config, **ref.conf})
        self._hosts: dict[int, BoltHost] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_hosts": {}}

    def _route_of(self, row: Row, values: list[Any]) -> int:
        indexes = self.fields[(row[0], row[1])]
        return route_hash([values[i] for i in indexes], self.boxing)

    def route(self, row: Row) -> int:
        """Return the route of emit ``row``: ``route_hash`` of its grouping values."""
        return self._route_of(row, decode_value(row[3]))

    def task(self, key: tuple[Any, ...], route: int | None) -> int:
        """Return the task a key with ``route`` belongs to (``key_task_index``)."""
        return key_task_index(key, route, self.tasks, self.boxing)

    def group_key(self, row: Row) -> bytes | Row:
        """Return the encoded state key of emit ``row``, from the bolt's ``state_key``.

        ``state_key`` runs on the task the tuple's grouping values route it
        to, as on Storm. When it raises (or returns a key that cannot be
        encoded) under the dead-letter policy, the result is the tuple's dead
        row instead.

        Raises:
            ComponentError: ``state_key`` failed under the fail policy.
        """
        values = decode_value(row[3])
        route = self._route_of(row, values)
        index = route % self.tasks  # Python's % is floorMod, as Storm's
        host = self._hosts.get(index)
        if host is None:
            topology = topology_of(self.ref)
            host = BoltHost(topology, self.ref.component, index, self.ref.conf)
            self._hosts[index] = host
        tup = host.make_tuple(row[0], row[1], values, row[4])
        try:
            return encode_key(tuple(host.instance.state_key(tup)))
        except Exception as exc:
            return self._failed(row, values, exc)

    def _failed(self, row: Row, values: list[Any], exc: Exception) -> Row:
        name, source, stream = self.ref.component, row[0], row[1]
        partition, batch = spark_task()
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, CodecError):
            error = f"state_key() returned a key that cannot be encoded ({exc})"
        if self.on_error != "dead-letter":
            msg = (
                f"bolt {name!r} failed in state_key() on tuple {values!r} from "
                f"{source!r}/{stream!r} (partition {partition}, batch {batch}): "
                f"{error}; fix state_key() (a tuple of str, int or bytes values) "
                "and restart the query from the same checkpoint, or set "
                f"{_ON_ERROR_KEY}=dead-letter to divert failing tuples to dead rows"
            )
            raise ComponentError(msg) from exc
        report = {
            "source": source,
            "stream": stream,
            "error": error,
            "batch": batch,
            "partition": partition,
        }
        return (name, stream, DEAD, row[3], None, encode_value(report), row[6])
