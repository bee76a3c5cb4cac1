"""A topology laid out as ``sparse quickstart`` does: components under ``../src``."""

from sbt_project_parts.bolts import ProjectCountBolt
from sbt_project_parts.spouts import ProjectWordSpout
from streamparse import Grouping, Topology


class Project(Topology):
    word_spout = ProjectWordSpout.spec()
    count_bolt = ProjectCountBolt.spec(
        inputs={word_spout: Grouping.fields("word")}, par=2
    )
