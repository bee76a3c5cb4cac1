"""``topologies/wordcount.py`` with its counter on 2 tasks instead of 3.

Same file stem, so the same topology name: runs of either file share the
committed state in the ring, as a redeployment with another parallelism does.
"""

from streamparse import Grouping, Topology

from topologies.wordcount import Count, Lines, Split


class WordCount(Topology):
    lines = Lines.spec(par=2)
    split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
    count = Count.spec(
        inputs={split: Grouping.fields("word")},
        par=2,
        config={"sr3.recovery.mechanism": "star"},
    )
