"""One value per tuple, fields-grouped on it over five recording tasks."""

from sbt_components import RecordBolt, SentenceSpout
from streamparse import Grouping, Topology


class FieldsRoutes(Topology):
    config = {"topology.message.timeout.secs": 20}
    value_spout = SentenceSpout.spec()
    value_sink = RecordBolt.spec(
        inputs={value_spout: Grouping.fields("sentence")}, par=5
    )
