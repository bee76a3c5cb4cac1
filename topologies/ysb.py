"""The Yahoo Streaming Benchmark: ad events, a campaign join, windowed counts.

A replayable spout generates the benchmark's ad events deterministically from
``ysb.seed`` (default 42): ``ysb.events`` events (default 20000), one every
``ysb.event.interval.ms`` of event time (default 1), over ``ysb.campaigns``
campaigns (default 10) of ``ysb.ads.per.campaign`` ads each (default 10). The
pipeline is the benchmark's: filter views, project, join each ad with its
campaign (a static table here, Redis in the original), and count views per
campaign in tumbling ``ysb.window.ms`` windows (default 10 s) in a stateful bolt.
Spout task ``i`` of ``n`` emits the events whose number is ``i`` modulo ``n``::

    sr3 run topologies/ysb.py --until-idle
    sr3 state dump --topology ysb --component window_count
"""

from __future__ import annotations

import random
import uuid

from streamparse import Bolt, Grouping, Topology

from storm_bridge import ReplayableSpout, StatefulBolt

AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")
EVENT_TYPES = ("view", "click", "purchase")


def campaign_table(campaigns, ads_per_campaign, seed):
    """Return ``{ad_id: campaign_id}``, deterministic in its arguments."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    table = {}
    for _ in range(campaigns):
        campaign = str(uuid.UUID(int=rng.getrandbits(128)))
        for _ in range(ads_per_campaign):
            table[str(uuid.UUID(int=rng.getrandbits(128)))] = campaign
    return table


def event(index, ads, seed, interval_ms):
    """Return ad event ``index``: (user, page, ad, ad type, event type, time ms, ip)."""
    rng = random.Random(seed * 1_000_003 + index)  # noqa: S311
    return (
        str(uuid.UUID(int=rng.getrandbits(128))),
        str(uuid.UUID(int=rng.getrandbits(128))),
        ads[rng.randrange(len(ads))],
        AD_TYPES[rng.randrange(len(AD_TYPES))],
        EVENT_TYPES[rng.randrange(len(EVENT_TYPES))],
        index * interval_ms,
        "1.2.3.4",
    )


def settings(conf):
    """Return the generator settings of a Storm conf."""
    return {
        "events": int(conf.get("ysb.events", 20000)),
        "campaigns": int(conf.get("ysb.campaigns", 10)),
        "ads": int(conf.get("ysb.ads.per.campaign", 10)),
        "seed": int(conf.get("ysb.seed", 42)),
        "interval_ms": int(conf.get("ysb.event.interval.ms", 1)),
        "window_ms": int(conf.get("ysb.window.ms", 10_000)),
    }


class AdEvents(ReplayableSpout):
    outputs = [
        "user_id",
        "page_id",
        "ad_id",
        "ad_type",
        "event_type",
        "event_time",
        "ip_address",
    ]

    def initialize(self, stormconf, context):
        tasks = sorted(
            int(t)
            for t, c in context["task->component"].items()
            if c == context["componentid"]
        )
        self.index = tasks.index(int(context["taskid"]))
        self.step = len(tasks)
        self.settings = settings(stormconf)
        s = self.settings
        self.ads = sorted(campaign_table(s["campaigns"], s["ads"], s["seed"]))
        self.next_event = self.index

    def seek(self, offset):
        self.next_event = self.index if offset is None else offset + self.step

    def next_tuple(self):
        s = self.settings
        if self.next_event >= s["events"]:
            self.end_of_input()  # --until-idle ends without a quiet period
            return
        n = self.next_event
        self.next_event += self.step
        self.emit(list(event(n, self.ads, s["seed"], s["interval_ms"])), offset=n)


class ViewFilter(Bolt):
    outputs = ["ad_id", "event_time"]

    def process(self, tup):
        if tup.values.event_type == "view":
            self.emit([tup.values.ad_id, tup.values.event_time])


class CampaignJoin(Bolt):
    outputs = ["campaign_id", "ad_id", "event_time"]

    def initialize(self, conf, ctx):
        s = settings(conf)
        self.campaigns = campaign_table(s["campaigns"], s["ads"], s["seed"])

    def process(self, tup):
        ad_id, event_time = tup.values
        campaign = self.campaigns.get(ad_id)
        if campaign is not None:
            self.emit([campaign, ad_id, event_time])


class WindowCount(StatefulBolt):
    """Views per campaign per tumbling window: state field = window start (ms)."""

    outputs = ["campaign_id", "window_start", "count"]

    def initialize(self, conf, ctx):
        self.window_ms = settings(conf)["window_ms"]

    def process(self, tup):
        campaign, _ad, event_time = tup.values
        window = event_time - event_time % self.window_ms
        field = str(window)
        count = self.state.get(field, 0) + 1
        self.state[field] = count
        self.emit([campaign, window, count])


class YahooStreamingBenchmark(Topology):
    ad_events = AdEvents.spec(par=2)
    view_filter = ViewFilter.spec(inputs={ad_events: Grouping.SHUFFLE}, par=2)
    campaign_join = CampaignJoin.spec(inputs={view_filter: Grouping.SHUFFLE}, par=2)
    window_count = WindowCount.spec(
        inputs={campaign_join: Grouping.fields("campaign_id")},
        par=2,
        config={"sr3.recovery.mechanism": "star"},
    )
