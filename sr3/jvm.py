"""The flags every JVM a lab starts runs with, ours and Apache's alike.

A lab shares a machine of few cores between ZooKeeper, Storm's daemons and
workers, Kafka brokers, ring nodes and the Python tasks the workers feed. The
client JIT alone (C1) and the serial collector start each of those JVMs with
about a third less CPU and keep it lower while it runs, because no C2 compiler
or parallel GC threads compete with the processes that do the work. None of
them is the bottleneck of a Python topology: word count on real Storm ran
faster with them than without (9,503 against 8,354 tuples/s, 37 against 43
worker CPU-s per run; bench/storm_apache.py --only-jit).
"""

from __future__ import annotations

from typing import Final

__all__ = ["LAB_JVM_FLAGS"]

#: ZooKeeper (1.05 -> 0.7 CPU-s per start), Storm's daemons and workers
#: (worker CPU in the Storm tests 177 -> 116 s), Kafka brokers. A topology
#: that wants the full JIT or another collector sets
#: ``topology.worker.childopts: "-XX:TieredStopAtLevel=4 -XX:-UseSerialGC"``.
LAB_JVM_FLAGS: Final = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
