"""The lab's Apache Kafka broker: ``sr3 lab up --kafka``, its status, its stop.

One KRaft broker (combined broker and controller, :class:`KafkaBroker`), or
with ``--kafka-brokers 3`` a three-node cluster (:class:`KafkaCluster`), runs
from the jars ``scripts/fetch-jars.sh`` fetched, with its data and logs in the
lab's ``kafka/`` dir. lab.json records it in its ``kafka`` section
(:attr:`Lab.kafka`: dir, broker count and bootstrap address list), changed
only under the lab's lock; topics ``sr3 lab topic`` creates on three brokers
get replication factor 3 and ``min.insync.replicas`` 2; ``sr3 lab down``
(:meth:`Lab.stop`) stops it; ``sr3 status --json`` shows it under ``kafka``.
Topologies reach it with ``sr3.kafka.bootstrap``.

In a netns lab (``sr3 lab up --netns --kafka``) the single broker runs on
``h1`` (:data:`sr3_cli.lab_netns.CONTROL_DAEMONS`), listening on and
advertising that host's address, so clients on every host and in the root
namespace reach it across the bridge; a multi-broker cluster is loopback-only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.daemons.kafka import KafkaBroker, KafkaBrokerError
from sr3_cli.daemons.kafka_cluster import KafkaCluster
from sr3_cli.lab import Lab, resolve_lab_dir

__all__ = [
    "create_topic",
    "kafka_daemons",
    "kafka_broker",
    "kafka_status",
    "lab_up",
    "start_kafka",
    "stop_kafka",
]

_TIMEOUT_S: Final = 30.0
#: ``min.insync.replicas`` of topics created on a lab of three or more brokers.
_MIN_INSYNC: Final = 2

#: The lab's Kafka: one broker, or a multi-node cluster.
LabKafka = KafkaBroker | KafkaCluster


def kafka_broker(lab: Lab) -> LabKafka | None:
    """Return the lab's broker (or cluster) as lab.json records it, else None."""
    section = lab.kafka
    if section is None or "dir" not in section:
        return None
    try:
        if int(section.get("brokers", 1)) > 1:
            return KafkaCluster.attach(Path(section["dir"]))
        return KafkaBroker.attach(Path(section["dir"]))
    except KafkaBrokerError:
        return None


def start_kafka(lab: Lab, *, brokers: int = 1) -> LabKafka:
    """Start the lab's Kafka (``brokers`` nodes) unless it runs; return it.

    Raises:
        KafkaMissingError: Kafka's jars are not fetched, or java is missing.
        KafkaBrokerError: a broker did not start (the message quotes its log),
            or the lab runs Kafka with another number of brokers.
    """
    with lab.locked():
        current = kafka_broker(lab)
        size = len(current.nodes) if isinstance(current, KafkaCluster) else 1
        if current is not None and size != brokers:
            msg = (
                f"lab {lab.root} has a Kafka of {size} broker(s), not {brokers}: "
                f"use --kafka-brokers {size}, or `sr3 lab down --purge` first"
            )
            raise KafkaBrokerError(msg)
        if current is not None and current.running():
            return current
        kafka = current or _new_kafka(lab, lab.root / "kafka", brokers)
        if isinstance(kafka, KafkaBroker):  # restarted: on its host again
            where = lab_netns.daemon_placements(lab, ["kafka"]).get("kafka")
            kafka.command_prefix = tuple(where.prefix) if where else ()
        # recorded first: should this command die while the JVMs start,
        # `sr3 lab down` still finds them through broker.json / cluster.json
        lab.kafka = {"dir": str(kafka.root), "brokers": brokers, "bootstrap": None}
        try:
            kafka.start()
        except BaseException:
            lab.kafka = None
            raise
        lab.kafka = {
            "dir": str(kafka.root),
            "brokers": brokers,
            "bootstrap": kafka.bootstrap,
            "version": kafka.home.version,
        }
        return kafka


def _new_kafka(lab: Lab, root: Path, brokers: int) -> LabKafka:
    where = lab_netns.daemon_placements(lab, ["kafka"]).get("kafka")
    if where is not None and brokers > 1:
        msg = (
            f"lab {lab.root} runs on netns hosts, where only one Kafka broker "
            "runs (on h1): drop --kafka-brokers, or run a loopback lab"
        )
        raise ConfigError(msg)
    if brokers == 1:
        if (root / "cluster.json").exists():
            msg = (
                f"{root} holds a multi-broker Kafka cluster: use --kafka-brokers "
                "with its size, or `sr3 lab down --purge` first"
            )
            raise KafkaBrokerError(msg)
        if where is None:
            return KafkaBroker(root, detached=True)
        return KafkaBroker(
            root, detached=True, host=where.address, command_prefix=where.prefix
        )
    if (root / "broker.json").exists():
        msg = (
            f"{root} holds a single Kafka broker: use --kafka-brokers 1, or "
            "`sr3 lab down --purge` first"
        )
        raise KafkaBrokerError(msg)
    return KafkaCluster(root, brokers=brokers, detached=True)


def stop_kafka(lab: Lab) -> None:
    """Stop the lab's Kafka broker, if any (its data stays in the lab dir)."""
    with lab.locked():
        broker = kafka_broker(lab)
        if broker is not None:
            broker.stop()
        lab.kafka = None


def kafka_daemons(lab: Lab) -> list[str]:
    """Return ``["kafka"]`` when the lab runs a Kafka broker, else []."""
    return ["kafka"] if lab.kafka is not None else []


def kafka_status(lab: Lab) -> dict[str, Any] | None:
    """Return the ``kafka`` object of ``sr3 status --json`` (None: no broker)."""
    broker = kafka_broker(lab)
    return broker.status() if broker is not None else None


def lab_up(args: argparse.Namespace) -> int:
    """``sr3 lab up [--storm] [--kafka [--kafka-brokers N]]``: lab, Storm, Kafka."""
    # storm_cmd reaches sr3_cli.commands, which imports the status that imports
    # this module: imported here, `import sr3_cli.status` works on its own
    from sr3_cli import storm_cmd  # noqa: PLC0415

    brokers = int(getattr(args, "kafka_brokers", 1) or 1)
    code = storm_cmd.lab_up(args)
    if code != 0 or not (args.kafka or brokers > 1):
        return code
    lab = Lab.load(_lab_root(args))
    kafka = start_kafka(lab, brokers=brokers)
    what = "broker at" if brokers == 1 else f"{brokers} brokers (combined KRaft) at"
    print(
        f"Apache Kafka {kafka.home.version}: {what} {kafka.bootstrap} "
        f"(KRaft, data and logs in {kafka.root}); topologies reach it with "
        f"-o sr3.kafka.bootstrap={kafka.bootstrap}"
    )
    return 0


def _lab_root(args: argparse.Namespace) -> Path:
    # as every `sr3 lab` command: --dir, else $SR3_LAB, else ./lab
    return resolve_lab_dir(args.lab_dir) or Path("lab").resolve()


def create_topic(args: argparse.Namespace) -> int:
    """``sr3 lab topic NAME [--partitions N]``: create a topic on the lab's broker.

    Raises:
        ConfigError: the lab has no running broker, or Kafka refused the topic.
    """
    lab = Lab.load(_lab_root(args))
    broker = kafka_broker(lab)
    if broker is None or not broker.running():
        msg = f"lab {lab.root} runs no Kafka broker; start it with `sr3 lab up --kafka`"
        raise ConfigError(msg)
    from confluent_kafka import KafkaException  # noqa: PLC0415 (fast --help)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415
    from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    replicas = min(3, len(broker.nodes)) if isinstance(broker, KafkaCluster) else 1
    # three replicas, two in sync: one broker may die without losing a write
    config = {"min.insync.replicas": str(_MIN_INSYNC)} if replicas >= 3 else {}
    topic = NewTopic(args.name, args.partitions, replicas, config=config)
    futures = admin.create_topics([topic])
    try:
        for future in futures.values():
            future.result(_TIMEOUT_S)
    except KafkaException as exc:
        msg = f"Kafka at {broker.bootstrap} refused topic {args.name!r}: {exc}"
        raise ConfigError(msg) from exc
    where = broker.bootstrap
    copies = f", replication factor {replicas}" if replicas > 1 else ""
    print(
        f"created topic {args.name} ({args.partitions} partitions{copies}) on {where}"
    )
    return 0
