"""The Spark a standalone cluster runs: the pip pyspark's ``SPARK_HOME`` and java.

The pip package has no ``sbin/start-master.sh``; :func:`spark_home` finds its
``bin/spark-class``, which ``exec``s java. Both checks raise
:class:`SparkMissingError` naming what is missing and how to install it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Final

from spark_bridge.errors import SparkBridgeError

__all__ = [
    "SparkMissingError",
    "StandaloneClusterError",
    "check_java",
    "spark_home",
]

E_NO_JAVA: Final = (
    "java not found (neither $JAVA_HOME/bin/java nor `java` on PATH): the Spark "
    "standalone cluster needs Java 17; install it with "
    "`apt-get install openjdk-17-jre-headless` or set JAVA_HOME"
)
E_NO_PYSPARK: Final = (
    "pyspark is not installed in {python}: the standalone cluster runs from the "
    "pip package; install it with `pip install -e .[spark]` or `pip install pyspark`"
)


class StandaloneClusterError(SparkBridgeError):
    """The standalone master or worker did not start, or is not this cluster's."""


class SparkMissingError(StandaloneClusterError):
    """Java or pyspark, needed to run a standalone cluster, is not installed."""


def spark_home() -> Path:
    """Return ``SPARK_HOME`` of the installed pyspark (its package directory).

    Raises:
        SparkMissingError: pyspark is not installed or has no ``bin/spark-class``.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkMissingError(E_NO_PYSPARK.format(python=sys.executable))
    home = Path(spec.origin).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        msg = f"{home} has no bin/spark-class: reinstall pyspark (pip install pyspark)"
        raise SparkMissingError(msg)
    return home


def check_java() -> None:
    """Raise :class:`SparkMissingError` unless a java is installed."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return
    if shutil.which("java") is None:
        raise SparkMissingError(E_NO_JAVA)
