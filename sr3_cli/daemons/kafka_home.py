"""The fetched Apache Kafka a lab broker runs: the pinned release, its jars, java.

``scripts/fetch-jars.sh`` resolves the release ``jvm/kafka/pom.xml`` pins from
Maven Central into ``.cache/kafka-<version>/`` (``libs/`` is the broker's
classpath, ``config/log4j2.xml`` its logging). :class:`KafkaHome` finds that
directory and checks it complete; :func:`java_binary` finds the java that runs
it. Both raise :class:`KafkaMissingError` naming what is missing and the fix.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sr3.errors import SR3Error

__all__ = [
    "KafkaBrokerError",
    "KafkaHome",
    "KafkaMissingError",
    "java_binary",
    "pinned_version",
]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
POM: Final = REPO_ROOT / "jvm" / "kafka" / "pom.xml"

E_NOT_FETCHED: Final = (
    "Apache Kafka {version} is not fetched: {missing} is missing. Run "
    "`scripts/fetch-jars.sh` (or `scripts/bootstrap.sh`), which resolves it from "
    "Maven Central into {home}"
)
E_NO_JAVA: Final = (
    "java not found ({where}): Apache Kafka {version} brokers need Java 17+; "
    "install it with `apt-get install openjdk-17-jre-headless` or set JAVA_HOME"
)


class KafkaBrokerError(SR3Error):
    """The Kafka broker did not start, stop, or is not this lab's."""


class KafkaMissingError(KafkaBrokerError):
    """Kafka's jars or Java, needed to run a broker, are missing."""


def pinned_version(pom: Path = POM) -> str:
    """Return the Kafka release ``jvm/kafka/pom.xml`` pins.

    Raises:
        KafkaMissingError: the pom is missing or has no ``<kafka.version>``.
    """
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {pom} ({exc}): it pins the Apache Kafka release"
        raise KafkaMissingError(msg) from exc
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", text)
    if match is None:
        msg = f"{pom} has no <kafka.version>; restore the property"
        raise KafkaMissingError(msg)
    return match.group(1)


@dataclass(frozen=True)
class KafkaHome:
    """A fetched Kafka: ``libs/`` (the classpath) and ``config/log4j2.xml``.

    Attributes:
        root: The directory (``.cache/kafka-<version>``).
        version: The Kafka release in it.
    """

    root: Path
    version: str

    @classmethod
    def locate(cls, cache_dir: Path | None = None) -> KafkaHome:
        """Return the fetched home of the pinned release, checked complete.

        Args:
            cache_dir: Where the fetch script writes (default ``SR3_CACHE_DIR``
                or ``<repo>/.cache``).

        Raises:
            KafkaMissingError: not fetched; the message names the missing jar
                and the command that fetches it.
        """
        version = pinned_version()
        cache = cache_dir or Path(
            os.environ.get("SR3_CACHE_DIR") or REPO_ROOT / ".cache"
        )
        root = (
            cache if cache.is_absolute() else REPO_ROOT / cache
        ) / f"kafka-{version}"
        for needed in (f"libs/kafka_2.13-{version}.jar", "config/log4j2.xml"):
            if not (root / needed).is_file():
                raise KafkaMissingError(
                    E_NOT_FETCHED.format(
                        version=version, missing=root / needed, home=root
                    )
                )
        return cls(root, version)

    @property
    def classpath(self) -> str:
        """The JVM classpath: every jar of ``libs/``."""
        return str(self.root / "libs" / "*")


def java_binary(version: str) -> str:
    """Return ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH.

    Raises:
        KafkaMissingError: that java does not exist.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        where = f"JAVA_HOME={home} has no executable bin/java"
        raise KafkaMissingError(E_NO_JAVA.format(where=where, version=version))
    found = shutil.which("java")
    if found is None:
        where = "JAVA_HOME is unset and `java` is not on PATH"
        raise KafkaMissingError(E_NO_JAVA.format(where=where, version=version))
    return found
