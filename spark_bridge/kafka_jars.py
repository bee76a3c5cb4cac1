"""Spark's Kafka source jars (``spark-sql-kafka-0-10``) on the session's classpath.

``scripts/fetch-jars.sh`` resolves the release ``jvm/spark-kafka/pom.xml`` pins
into ``.cache/spark-kafka-<version>/jars``; a session that may run a topology
with a ``KafkaSpout`` or ``KafkaSink`` gets them as ``spark.jars`` when it
starts (Spark reads its classpath once). Missing jars do not stop a session:
the topology that needs them fails with :data:`E_NO_JARS` instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["E_NO_JARS", "POM", "spark_kafka_jars"]

_REPO_ROOT: Final = Path(__file__).resolve().parent.parent
#: The pom pinning the connector's release.
POM: Final = _REPO_ROOT / "jvm" / "spark-kafka" / "pom.xml"
#: The connector's own jar: its presence marks a complete fetch.
_CONNECTOR: Final = "spark-sql-kafka-0-10_2.13-{version}.jar"
E_NO_JARS: Final = (
    "Spark's Kafka source (spark-sql-kafka-0-10) is not on the Spark session's "
    "classpath{detail}. Run `scripts/fetch-jars.sh spark-kafka`, which resolves it "
    "from Maven Central into .cache/spark-kafka-<version>/jars, then start a new "
    "session (`sr3 run --engine spark` adds the jars itself; a session of your "
    "own needs .config('spark.jars', ','.join(map(str, spark_kafka_jars()))))"
)


def _pinned(pom: Path) -> str | None:
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"<spark\.kafka\.version>\s*([^<\s]+)\s*<", text)
    return match.group(1) if match else None


def spark_kafka_jars(cache_dir: Path | str | None = None) -> list[Path]:
    """Return the fetched jars of Spark's Kafka source ([]: not fetched).

    Args:
        cache_dir: Where ``scripts/fetch-jars.sh`` writes (its ``SR3_CACHE_DIR``;
            default ``<repo>/.cache``); relative paths are the repository's.
    """
    version = _pinned(POM)
    if version is None:
        return []
    cache = Path(cache_dir) if cache_dir else _REPO_ROOT / ".cache"
    if not cache.is_absolute():
        cache = _REPO_ROOT / cache
    jars = cache / f"spark-kafka-{version}" / "jars"
    if not (jars / _CONNECTOR.format(version=version)).is_file():
        return []
    return sorted(jars.glob("*.jar"))
