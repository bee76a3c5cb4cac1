"""Java command lines for Apache Storm's daemons and ``storm jar``-style clients.

Storm's own ``bin/storm`` launcher ships only in its binary tarball, which is
not on Maven Central. This module builds the same kind of command lines from a
:class:`~storm_bridge.apache.home.StormHome`: the main class, the classpath
(``lib/*`` for daemons, ``lib-worker/*`` plus the topology jar for clients),
``-Dstorm.home``, ``-Dstorm.conf.file`` (a lab's own ``storm.yaml``),
``-Dstorm.options`` (per-process overrides, which a supervisor hands on to the
workers it launches), ``-Dstorm.log.dir`` and the log4j2 config.

``python -m storm_bridge.apache.launcher jar JAR CLASS ARGS...`` runs a client
in the foreground, for scripts and humans.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sr3.jvm import LAB_JVM_FLAGS
from storm_bridge.apache.home import StormHome, java_binary

__all__ = [
    "DAEMON_MAINS",
    "daemon_command",
    "jar_command",
    "parse_option",
    "storm_options",
]

#: Main class of each daemon Storm's launcher starts.
DAEMON_MAINS: Final = {
    "nimbus": "org.apache.storm.daemon.nimbus.Nimbus",
    "supervisor": "org.apache.storm.daemon.supervisor.Supervisor",
    "ui": "org.apache.storm.daemon.ui.UIServer",
}


def storm_options(options: Mapping[str, object]) -> str:
    """Encode conf overrides for ``-Dstorm.options``.

    Storm splits the value on commas, URL-decodes each ``key=value`` and reads
    the value as JSON when it parses (else as a string), so each pair is
    URL-encoded whole and each value written as JSON (strings stay bare).
    """
    pairs = []
    for key, value in options.items():
        text = value if isinstance(value, str) else json.dumps(value)
        pairs.append(urllib.parse.quote_plus(f"{key}={text}"))
    return ",".join(pairs)


def daemon_command(  # noqa: PLR0913 (keyword-only options)
    home: StormHome,
    daemon: str,
    *,
    conf_file: Path,
    log_dir: Path,
    name: str | None = None,
    heap_mb: int = 256,
    options: Mapping[str, object] | None = None,
    java: str | None = None,
    jvm_args: Sequence[str] = (),
) -> list[str]:
    """Return the argv that runs one Storm daemon in the foreground.

    Args:
        home: The fetched STORM_HOME.
        daemon: ``nimbus``, ``supervisor`` or ``ui``.
        conf_file: The cluster's ``storm.yaml`` (its dir joins the classpath).
        log_dir: ``storm.log.dir``: daemon logs and ``workers-artifacts/``.
        name: The log file's stem (default ``daemon``): ``<name>.log``.
        heap_mb: ``-Xmx`` of the JVM.
        options: Conf overrides passed as ``-Dstorm.options``.
        java: The java binary (default :func:`java_binary`).
        jvm_args: More JVM options, before the main class.

    Raises:
        ValueError: an unknown daemon.
        StormMissingError: java is missing.
    """
    if daemon not in DAEMON_MAINS:
        msg = f"unknown Storm daemon {daemon!r}; use one of {sorted(DAEMON_MAINS)}"
        raise ValueError(msg)
    return [
        java or java_binary(),
        "-server",
        f"-Xmx{heap_mb}m",
        f"-Ddaemon.name={daemon}",
        f"-Dstorm.home={home.root}",
        f"-Dstorm.conf.file={conf_file}",
        f"-Dstorm.options={storm_options(options or {})}",
        f"-Dstorm.log.dir={log_dir}",
        f"-Dlogfile.name={name or daemon}.log",
        f"-Dlog4j.configurationFile={home.cluster_log_config}",
        "-Djava.net.preferIPv4Stack=true",
        *LAB_JVM_FLAGS,
        *jvm_args,
        "-cp",
        home.daemon_classpath(conf_file.parent),
        DAEMON_MAINS[daemon],
    ]


def jar_command(  # noqa: PLR0913 (keyword-only options)
    home: StormHome,
    jar: Path,
    main_class: str,
    args: Sequence[str] = (),
    *,
    conf_file: Path | None = None,
    options: Mapping[str, object] | None = None,
    log_dir: Path | None = None,
    java: str | None = None,
    extra_jars: Sequence[Path] = (),
) -> list[str]:
    """Return the argv of a ``storm jar JAR CLASS ARGS`` run.

    The client sees ``lib-worker/*``, ``extlib/*``, the jar and ``extra_jars``
    (e.g. ``home.flux`` jars for Flux) on its classpath and ``-Dstorm.jar``
    names the jar that ``StormSubmitter`` uploads to Nimbus.

    Args:
        home: The fetched STORM_HOME.
        jar: The topology jar.
        main_class: The class whose ``main`` submits (or runs) the topology.
        args: Its arguments.
        conf_file: A ``storm.yaml`` naming the cluster (``nimbus.seeds``,
            ``nimbus.thrift.port``); None leaves Storm's defaults.
        options: Conf overrides (``-c key=value`` of ``bin/storm``).
        log_dir: ``storm.log.dir`` of the client (default: the jar's dir).
        java: The java binary (default :func:`java_binary`).
        extra_jars: More jars after the topology jar.

    Raises:
        StormMissingError: java is missing.
    """
    jar = Path(jar).resolve()
    conf_dir = conf_file.parent if conf_file is not None else None
    classpath = home.client_classpath(conf_dir, jar, *extra_jars)
    return [
        java or java_binary(),
        "-client",
        "-Ddaemon.name=",
        f"-Dstorm.home={home.root}",
        f"-Dstorm.conf.file={conf_file or ''}",
        f"-Dstorm.options={storm_options(options or {})}",
        f"-Dstorm.log.dir={log_dir or jar.parent}",
        f"-Dlog4j.configurationFile={home.cluster_log_config}",
        "-Dlogfile.name=client.log",
        "-Djava.net.preferIPv4Stack=true",
        "-cp",
        classpath,
        f"-Dstorm.jar={jar}",
        "-Dstorm.dependency.jars=",
        "-Dstorm.dependency.artifacts={}",
        main_class,
        *args,
    ]


def parse_option(text: str) -> tuple[str, object]:
    """Parse ``-c KEY=VALUE`` as Storm's launcher does (VALUE as JSON, else text)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        msg = f"-c wants KEY=VALUE, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    try:
        value: object = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jar JAR CLASS ARGS...`` against a cluster's storm.yaml; return its code."""
    parser = argparse.ArgumentParser(
        prog="python -m storm_bridge.apache.launcher",
        description="Run a storm jar-style client with the fetched Apache Storm.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    jar = sub.add_parser("jar", help="run CLASS from JAR with Storm's client classpath")
    jar.add_argument("jar", type=Path)
    jar.add_argument("main_class")
    jar.add_argument("args", nargs=argparse.REMAINDER)
    jar.add_argument("--conf", type=Path, help="the cluster's storm.yaml")
    jar.add_argument(
        "-c",
        dest="options",
        action="append",
        type=parse_option,
        default=[],
        help="conf override KEY=VALUE (repeatable)",
    )
    ns = parser.parse_args(argv)
    home = StormHome.locate()
    cmd = jar_command(
        home,
        ns.jar,
        ns.main_class,
        ns.args,
        conf_file=ns.conf,
        options=dict(ns.options),
    )
    return subprocess.call(cmd, env=os.environ.copy())  # noqa: S603 (argv built here)


if __name__ == "__main__":
    sys.exit(main())
