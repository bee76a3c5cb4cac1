"""A Linear Road subset: position reports, segment statistics and tolls.

A replayable spout generates position reports deterministically from
``lr.seed`` (default 3): ``lr.vehicles`` vehicles (default 100) on one
expressway report every 30 s for ``lr.minutes`` minutes (default 10), each at
its own speed. ``segment_stats`` (keyed by expressway, direction, segment)
keeps per-minute car counts and speeds, and prices a segment from the previous
minute as Linear Road does: ``2 * (cars - lr.toll.min.cars) ** 2`` when more than
``lr.toll.min.cars`` cars (default 5, 50 in the benchmark) were in it and their
average speed was under 40 mph. ``tolls`` (keyed by vehicle) charges a vehicle
a segment's toll the first time it is reported in that segment, and keeps its
balance::

    sr3 run topologies/linear_road.py --until-idle
    sr3 state dump --topology linear_road --component tolls

One spout task keeps each segment's reports in order, and one ``segment_stats``
task sees all of a segment's reports. A vehicle's reports reach ``tolls``
through the task of each segment, so reports of two segments may arrive in
either order (Storm orders tuples per upstream task only); charging per segment
entered, not per change of segment, makes the accounts independent of that
order, so every engine and every run reach the same state. ``tolls`` emits one
tuple per charge, keyed by vehicle and segment (``sr3.output.key.fields``).
"""

from __future__ import annotations

import random

from streamparse import Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

FEET_PER_SEGMENT = 5280
REPORT_EVERY_S = 30
LAV_MINUTES = 5


def settings(conf):
    """Return the generator and toll settings of a Storm conf."""
    return {
        "vehicles": int(conf.get("lr.vehicles", 100)),
        "minutes": int(conf.get("lr.minutes", 10)),
        "seed": int(conf.get("lr.seed", 3)),
        "min_cars": int(conf.get("lr.toll.min.cars", 5)),
    }


def reports(vehicles, minutes, seed):
    """Return every position report, in time order.

    A report is ``(time_s, vid, speed, xway, lane, direction, segment, position)``.
    """
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    cars = [
        (vid, rng.randrange(10, 60), rng.randrange(0, 3 * FEET_PER_SEGMENT))
        for vid in range(vehicles)
    ]
    out = []
    for step in range(minutes * 60 // REPORT_EVERY_S):
        time_s = step * REPORT_EVERY_S
        for vid, speed, start in cars:
            pos = start + speed * 5280 * time_s // 3600
            out.append((time_s, vid, speed, 0, 1, 0, pos // FEET_PER_SEGMENT, pos))
    return out


class PositionReports(ReplayableSpout):
    outputs = ["time", "vid", "speed", "xway", "lane", "dir", "seg", "pos"]

    def initialize(self, stormconf, context):
        s = settings(stormconf)
        self.reports = reports(s["vehicles"], s["minutes"], s["seed"])
        self.next_report = 0

    def seek(self, offset):
        self.next_report = 0 if offset is None else offset + 1

    def next_tuple(self):
        if self.next_report >= len(self.reports):
            self.end_of_input()  # --until-idle ends without a quiet period
            return
        n = self.next_report
        self.next_report += 1
        self.emit(list(self.reports[n]), offset=n)


class SegmentStats(StatefulBolt):
    """Per-minute car counts and speeds of a segment; prices the segment."""

    outputs = ["vid", "xway", "dir", "seg", "minute", "toll"]

    def initialize(self, conf, ctx):
        self.min_cars = settings(conf)["min_cars"]

    def process(self, tup):
        v = tup.values
        minute = v.time // 60 + 1
        bucket = self.state.get(str(minute)) or {"cars": [], "speed_sum": 0, "n": 0}
        if v.vid not in bucket["cars"]:
            bucket["cars"].append(v.vid)
        bucket["speed_sum"] += v.speed
        bucket["n"] += 1
        self.state[str(minute)] = bucket
        for old in [m for m in self.state if int(m) < minute - LAV_MINUTES]:
            del self.state[old]
        self.emit([v.vid, v.xway, v.dir, v.seg, minute, self.toll(minute)])

    def toll(self, minute):
        """Linear Road's toll of this segment during ``minute``."""
        previous = self.state.get(str(minute - 1))
        if not previous:
            return 0
        cars = len(previous["cars"])
        window = [
            self.state[m] for m in self.state if minute - LAV_MINUTES <= int(m) < minute
        ]
        lav = sum(b["speed_sum"] for b in window) / max(1, sum(b["n"] for b in window))
        if cars > self.min_cars and lav < 40:
            return 2 * (cars - self.min_cars) ** 2
        return 0


class Tolls(StatefulBolt):
    """A vehicle's account: each segment's toll, charged on its first report there."""

    outputs = ["vid", "segment", "minute", "toll"]

    def process(self, tup):
        vid, xway, direction, seg, minute, toll = tup.values
        segment = f"{xway}/{direction}/{seg}"
        charged = self.state.get("segments") or {}
        if segment not in charged:
            charged[segment] = toll
            self.state["segments"] = charged
            self.state["balance"] = self.state.get("balance", 0) + toll
            self.emit([vid, segment, minute, toll])


class LinearRoad(Topology):
    position_reports = PositionReports.spec(par=1)
    segment_stats = SegmentStats.spec(
        inputs={position_reports: Grouping.fields("xway", "dir", "seg")},
        par=2,
        config={"sr3.recovery.mechanism": "line"},
    )
    tolls = Tolls.spec(
        inputs={segment_stats: Grouping.fields("vid")},
        par=2,
        config={
            "sr3.recovery.mechanism": "tree",
            "sr3.output.key.fields": ["vid", "segment"],
        },
    )
