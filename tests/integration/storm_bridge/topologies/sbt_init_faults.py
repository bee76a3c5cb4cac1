"""A spout feeding a bolt whose ``initialize`` raises on its first starts.

``sbt.init_fails`` is how many starts of each ``FlakyInitBolt`` task raise (-1:
every one); the starts are counted in ``sbt.out_dir/init-<task id>``. The spout
emits ``sbt.sentences`` once, reliably, and forgets failed tuples.
"""

from pathlib import Path

from sbt_components import RecordBolt, SentenceSpout
from streamparse import Topology


class FlakyInitBolt(RecordBolt):
    """Records its tuples, once ``initialize`` stops raising."""

    def initialize(self, storm_conf, context):
        marker = Path(storm_conf["sbt.out_dir"]) / f"init-{context['taskid']}"
        starts = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(starts + 1))
        fails = int(storm_conf.get("sbt.init_fails", -1))
        if fails < 0 or starts < fails:
            msg = f"cannot reach db.example:5432 (start {starts + 1})"
            raise ConnectionError(msg)
        super().initialize(storm_conf, context)


class InitFaults(Topology):
    sentence_spout = SentenceSpout.spec()
    flaky_bolt = FlakyInitBolt.spec(inputs=[sentence_spout])
    record_bolt = RecordBolt.spec(inputs=[sentence_spout])
