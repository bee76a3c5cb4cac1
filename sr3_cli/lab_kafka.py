"""The lab's Apache Kafka broker: ``sr3 lab up --kafka``, its status, its stop.

One KRaft broker (combined broker and controller, :class:`KafkaBroker`) runs
from the jars ``scripts/fetch-jars.sh`` fetched, with its data and logs in the
lab's ``kafka/`` dir. lab.json records it in its ``kafka`` section
(:attr:`Lab.kafka`: dir and bootstrap address), changed only under the lab's
lock; ``sr3 lab down`` (:meth:`Lab.stop`) stops it; ``sr3 status --json`` shows
it under ``kafka``. Topologies reach it with ``sr3.kafka.bootstrap``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from sr3.errors import ConfigError
from sr3_cli import storm_cmd
from sr3_cli.daemons.kafka import KafkaBroker, KafkaBrokerError
from sr3_cli.lab import Lab, resolve_lab_dir

__all__ = [
    "create_topic",
    "kafka_broker",
    "kafka_status",
    "lab_up",
    "start_kafka",
    "stop_kafka",
]

_TIMEOUT_S: Final = 30.0


def kafka_broker(lab: Lab) -> KafkaBroker | None:
    """Return the lab's broker as lab.json records it, else None."""
    section = lab.kafka
    if section is None or "dir" not in section:
        return None
    try:
        return KafkaBroker.attach(Path(section["dir"]))
    except KafkaBrokerError:
        return None


def start_kafka(lab: Lab) -> KafkaBroker:
    """Start the lab's Kafka broker unless it runs; return it.

    Raises:
        KafkaMissingError: Kafka's jars are not fetched, or java is missing.
        KafkaBrokerError: the broker did not start (the message quotes its log).
    """
    with lab.locked():
        running = kafka_broker(lab)
        if running is not None and running.running():
            return running
        broker = running or KafkaBroker(lab.root / "kafka", detached=True)
        broker.detached = True
        # recorded first: should this command die while the JVM starts,
        # `sr3 lab down` still finds it through broker.json
        lab.kafka = {"dir": str(broker.root), "bootstrap": None}
        try:
            broker.start()
        except BaseException:
            lab.kafka = None
            raise
        lab.kafka = {
            "dir": str(broker.root),
            "bootstrap": broker.bootstrap,
            "version": broker.home.version,
        }
        return broker


def stop_kafka(lab: Lab) -> None:
    """Stop the lab's Kafka broker, if any (its data stays in the lab dir)."""
    with lab.locked():
        broker = kafka_broker(lab)
        if broker is not None:
            broker.stop()
        lab.kafka = None


def kafka_status(lab: Lab) -> dict[str, Any] | None:
    """Return the ``kafka`` object of ``sr3 status --json`` (None: no broker)."""
    broker = kafka_broker(lab)
    return broker.status() if broker is not None else None


def lab_up(args: argparse.Namespace) -> int:
    """``sr3 lab up [--storm] [--kafka]``: the lab, its Storm, then its broker."""
    code = storm_cmd.lab_up(args)
    if code != 0 or not args.kafka:
        return code
    lab = Lab.load(_lab_root(args))
    broker = start_kafka(lab)
    print(
        f"Apache Kafka {broker.home.version}: broker at {broker.bootstrap} "
        f"(KRaft, data and logs in {broker.root}); topologies reach it with "
        f"-o sr3.kafka.bootstrap={broker.bootstrap}"
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
    futures = admin.create_topics([NewTopic(args.name, args.partitions, 1)])
    try:
        for future in futures.values():
            future.result(_TIMEOUT_S)
    except KafkaException as exc:
        msg = f"Kafka at {broker.bootstrap} refused topic {args.name!r}: {exc}"
        raise ConfigError(msg) from exc
    where = broker.bootstrap
    print(f"created topic {args.name} ({args.partitions} partitions) on {where}")
    return 0
