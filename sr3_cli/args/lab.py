"""``sr3 lab``'s sub-commands and their options."""

from __future__ import annotations

import argparse
from typing import Any

from sr3_cli.args.common import handler, lab_dir_arg
from sr3_cli.argtypes import at_least, int_between, nonempty, tcp_port

__all__ = ["MAX_HOSTS", "MAX_LAB_NODES", "add_parsers"]

#: Most ring nodes ``sr3 lab up`` starts: all run on this machine.
MAX_LAB_NODES = 100
#: Most hosts ``--netns`` builds (each a namespace and a veth pair).
MAX_HOSTS = 32
NETEM_HELP = (
    "with --netns: shape every host's link, each direction: comma-separated "
    "rate=RATE (tc units: 100mbit), delay=MS (20ms), loss=PERCENT (0.1%%); "
    "rate alone uses tbf, delay and loss need the kernel's netem (default: unshaped)"
)


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``sr3 lab`` and its sub-commands to the ``sr3`` parser."""
    lab = sub.add_parser(
        "lab", help="a local ZooKeeper plus ring nodes"
    ).add_subparsers(dest="lab_command", required=True)
    up = lab.add_parser("up", help="start ZooKeeper and N ring nodes in the background")
    lab_dir_arg(up)
    up.add_argument(
        "--nodes",
        # every node is a process of about 40 MB on this machine
        type=int_between(1, MAX_LAB_NODES),
        default=None,
        help=f"ring nodes, 1..{MAX_LAB_NODES} (default 5 for a new lab; an "
        "existing one keeps its own)",
    )
    up.add_argument(
        "--zones", default="", help="comma-separated zone labels, round robin"
    )
    up.add_argument(
        "--zk",
        metavar="HOST:PORT[,HOST:PORT]",
        type=nonempty,
        default=None,
        help="use this running ZooKeeper instead of starting one (a new lab "
        "only; it gets a chroot of its own there, and `lab down` leaves the "
        "ZooKeeper running)",
    )
    up.add_argument(
        "--spark",
        action="store_true",
        help="also start a Spark standalone master and worker (URL in lab.json)",
    )
    up.add_argument(
        "--spark-cores", type=at_least(1), default=2, help="worker cores (2)"
    )
    up.add_argument("--spark-memory", default="2g", help="worker memory (2g)")
    up.add_argument(
        "--storm",
        action="store_true",
        help="also start a real Apache Storm cluster (Nimbus, supervisors) from "
        "the fetched jars; its storm.yaml is LAB/storm/conf/storm.yaml",
    )
    up.add_argument(
        "--supervisors",
        type=int_between(1, 8),
        default=1,
        help="Storm supervisors, 1..8 (1)",
    )
    up.add_argument(
        "--storm-slots",
        type=int_between(1, 8),
        default=2,
        help="worker slots per supervisor, 1..8 (2)",
    )
    up.add_argument(
        "--nimbus-port",
        type=tcp_port,
        default=None,
        help="Nimbus's Thrift port (default 6627 when free, else any free one; "
        "0: any free one)",
    )
    up.add_argument(
        "--kafka",
        action="store_true",
        help="also start an Apache Kafka broker (KRaft) from the fetched jars; "
        "its bootstrap address is in lab.json and `sr3 status --json`",
    )
    up.add_argument(
        "--kafka-brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="Kafka brokers: 1, or 3 combined KRaft nodes with topics "
        "replicated 3 times, 2 in sync (1; 3 implies --kafka)",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="also start a Prometheus server (Debian's package) scraping every "
        "ring node and `sr3 run`; its URL is in `sr3 status --json`",
    )
    _add_netns_up_args(up)
    up.set_defaults(handler=handler("sr3_cli.lab_metrics:lab_up"))
    down = lab.add_parser(
        "down", help="stop the lab's Storm, Spark, Kafka, nodes and ZooKeeper"
    )
    lab_dir_arg(down)
    down.add_argument("--purge", action="store_true", help="also delete the lab dir")
    down.set_defaults(handler=handler("sr3_cli.commands:lab_down"))
    kill = lab.add_parser("kill", help="SIGKILL ring nodes (ids as `sr3 status` shows)")
    lab_dir_arg(kill)
    kill.add_argument("node_ids", nargs="+", metavar="NODE_ID")
    kill.set_defaults(handler=handler("sr3_cli.commands:lab_kill"))
    restart = lab.add_parser(
        "restart", help="start stopped nodes again on their data dirs"
    )
    lab_dir_arg(restart)
    restart.add_argument("node_ids", nargs="+", metavar="NODE_ID")
    restart.set_defaults(handler=handler("sr3_cli.commands:lab_restart"))
    topic = lab.add_parser(
        "topic", help="create a topic on the lab's Kafka broker (lab up --kafka)"
    )
    lab_dir_arg(topic)
    topic.add_argument("name", help="the topic's name")
    topic.add_argument(
        "--partitions", type=int_between(1, 1000), default=2, help="partitions (2)"
    )
    topic.set_defaults(handler=handler("sr3_cli.lab_kafka:create_topic"))
    _add_netns_parsers(lab)


def _add_netns_up_args(up: argparse.ArgumentParser) -> None:
    """Add ``--netns``, ``--hosts`` and ``--netem`` to ``sr3 lab up``."""
    up.add_argument(
        "--netns",
        action="store_true",
        help="run ZooKeeper and the ring nodes on separate hosts: network "
        "namespaces on one bridge, each with its own address (needs root)",
    )
    up.add_argument(
        "--hosts",
        type=int_between(1, MAX_HOSTS),
        default=None,
        help=f"with --netns: hosts, 1..{MAX_HOSTS} (default: one for ZooKeeper "
        "plus one per ring node)",
    )
    up.add_argument("--netem", default="", help=NETEM_HELP)


def _add_netns_parsers(lab: argparse._SubParsersAction[Any]) -> None:
    """Add ``fail``, ``partition`` and ``heal`` to the ``sr3 lab`` subparsers."""
    fail = lab.add_parser("fail", help="netns lab: SIGKILL everything on hosts")
    lab_dir_arg(fail)
    fail.add_argument("hosts", nargs="+", metavar="HOST", help="as h2 (sr3 status)")
    fail.set_defaults(handler=handler("sr3_cli.lab_netns_cmd:lab_fail"))
    part = lab.add_parser(
        "partition", help="netns lab: drop traffic between a host and others"
    )
    lab_dir_arg(part)
    part.add_argument("host", metavar="HOST")
    part.add_argument(
        "--from",
        dest="peers",
        nargs="+",
        metavar="HOST",
        default=None,
        help="the hosts to cut it off from (default: every other host and "
        "'root', the namespace the sr3 CLI runs in)",
    )
    part.set_defaults(handler=handler("sr3_cli.lab_netns_cmd:lab_partition"))
    heal = lab.add_parser("heal", help="netns lab: end every partition")
    lab_dir_arg(heal)
    heal.set_defaults(handler=handler("sr3_cli.lab_netns_cmd:lab_heal"))
