"""``storm``: the client half of Storm's launcher, for streamparse on Storm 2.x.

Storm's ``bin/storm`` ships only in its binary tarball, not on Maven Central,
and streamparse calls it in Storm 1.x terms. This command (installed with the
project, so it is on PATH in the virtualenv) runs the fetched Storm
(``scripts/fetch-jars.sh``) and speaks both dialects:

``storm version``
    ``Storm <version>``, which ``sparse run`` compares with ``project.clj``.
``storm jar JAR org.apache.storm.flux.Flux --local [--no-splash] [--sleep N] YAML``
    What ``sparse run`` sends. Storm 2's Flux ignores ``--local`` and
    ``--sleep`` (local mode moved to ``storm local``), so the run becomes
    ``storm local``: ``org.apache.storm.LocalCluster`` runs Flux in-process
    with ``-Dstorm.local.sleeptime``. ``N`` is taken as seconds, which is what
    ``sparse run -t`` means (Storm 1's Flux read it as milliseconds);
    ``9223372036854775807`` (sparse's "forever") stays forever.
``storm local JAR CLASS ARGS... [--local-ttl S]``
    Storm 2's local mode.
``storm jar JAR CLASS ARGS...``
    A client on the cluster named by ``--config FILE`` (a ``storm.yaml``) and
    ``-c KEY=VALUE`` overrides.

With an SR3 lab (``SR3_LAB`` or ``--lab``), local runs get ``sr3.zk.hosts``,
``sr3.zk.chroot`` and ``sr3.node.secret`` of the lab, so stateful bolts
checkpoint into its ring. Daemons are started by ``sr3 lab up --storm``, not here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sr3.config import Sr3Config
from sr3.errors import SR3Error
from sr3_cli.lab import Lab, resolve_lab_dir
from storm_bridge.apache import StormHome, jar_command, java_binary, storm_options
from storm_bridge.apache.launcher import parse_option

__all__ = ["local_command", "main", "translate_flux_args"]

FLUX_MAIN: Final = "org.apache.storm.flux.Flux"
LOCAL_MAIN: Final = "org.apache.storm.LocalCluster"
#: What ``sparse run`` passes as ``--sleep`` for "run until interrupted".
_FOREVER: Final = 9223372036854775807
#: ``storm local``'s default time to live, seconds (Storm's ``LOCAL_TTL_DEFAULT``).
_DEFAULT_TTL_S: Final = 20
#: Storm 1.x Flux flags Storm 2's Flux ignores or rejects: name -> takes a value.
_STORM1_FLUX_FLAGS: Final = {"--local": False, "-l": False, "--sleep": True, "-s": True}

E_REMOTE_CONF = (
    "storm jar {main} needs the cluster: pass --config STORM_YAML (a lab's is "
    "LAB/storm/conf/storm.yaml) or -c nimbus.seeds='[\"HOST\"]' -c "
    "nimbus.thrift.port=PORT"
)


def translate_flux_args(args: Sequence[str]) -> tuple[list[str], bool, int | None]:
    """Split Storm 1.x Flux arguments into Storm 2's.

    Returns:
        (the arguments Storm 2's Flux accepts, whether ``--local`` was given,
        the ``--sleep`` value in seconds or None when absent or "forever").

    Raises:
        ValueError: ``--sleep`` without a whole number after it.
    """
    kept: list[str] = []
    local = False
    ttl_s: int | None = None
    items = iter(args)
    for arg in items:
        if arg not in _STORM1_FLUX_FLAGS:
            kept.append(arg)
            continue
        if not _STORM1_FLUX_FLAGS[arg]:
            local = True
            continue
        raw = next(items, None)
        try:
            value = int(raw) if raw is not None else None
        except ValueError:
            value = None
        if value is None:
            msg = f"{arg} needs a whole number of seconds, got {raw!r}"
            raise ValueError(msg)
        ttl_s = None if value <= 0 or value >= _FOREVER else value
    return kept, local, ttl_s


def _lab_options(lab_dir: Path | None) -> dict[str, object]:
    """The ``sr3.*`` keys a local run needs to reach a lab's ZooKeeper and ring."""
    if lab_dir is None or not (lab_dir / "lab.json").is_file():
        return {}
    config = Lab.load(lab_dir).config(Sr3Config.from_env())
    return {
        "sr3.zk.hosts": config.zk.hosts,
        "sr3.zk.chroot": config.zk.chroot,
        "sr3.node.secret": config.node.secret,
    }


def local_command(
    home: StormHome,
    jar: Path,
    main_class: str,
    args: Sequence[str],
    *,
    ttl_s: int | None,
    options: Mapping[str, object],
) -> list[str]:
    """Return the argv of ``storm local``: LocalCluster running ``main_class``.

    Local mode runs nimbus, a supervisor and the workers in one JVM, so the
    classpath is the daemons' (``lib/``), Flux's and the topology jar; Storm
    extracts the jar's ``resources/`` for the Python components.
    """
    jar = Path(jar).resolve()
    # The topology jar first: local mode extracts ``resources/`` from the first
    # jar on the classpath holding one, and flux-wrappers holds one too.
    classpath = os.pathsep.join(
        str(p) for p in (jar, home.lib / "*", home.extlib / "*", home.flux / "*")
    )
    # LocalCluster reads the time to live in seconds; "forever" is a huge value.
    ttl = str(ttl_s) if ttl_s is not None else str(_FOREVER // 1000)
    return [
        java_binary(),
        "-client",
        "-Ddaemon.name=",
        f"-Dstorm.home={home.root}",
        "-Dstorm.conf.file=",
        f"-Dstorm.options={storm_options(options)}",
        f"-Dstorm.log.dir={jar.parent}",
        f"-Dlog4j.configurationFile={home.cluster_log_config}",
        "-Dlogfile.name=local.log",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dstorm.local.sleeptime={ttl}",
        f"-Dstorm.jar={jar}",
        "-cp",
        classpath,
        LOCAL_MAIN,
        main_class,
        *args,
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="storm",
        description="Storm's client commands on the fetched Apache Storm 2.x "
        "(Storm 1.x flags of streamparse translated).",
    )
    parser.add_argument("--lab", default=None, help="SR3 lab dir (default $SR3_LAB)")
    parser.add_argument("--config", type=Path, default=None, help="a storm.yaml")
    parser.add_argument(
        "-c",
        dest="options",
        action="append",
        type=parse_option,
        default=[],
        metavar="KEY=VALUE",
        help="conf override (repeatable)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the Storm version")
    for name in ("jar", "local"):
        p = sub.add_parser(name, help=f"storm {name} JAR CLASS ARGS...")
        p.add_argument("jar", type=Path)
        p.add_argument("main_class")
        if name == "local":
            p.add_argument("--local-ttl", type=int, default=_DEFAULT_TTL_S)
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _command(ns: argparse.Namespace, home: StormHome) -> list[str]:
    """The java argv of a ``jar`` or ``local`` command.

    Raises:
        ValueError: a missing jar, a bad ``--sleep``, or a remote run with no
            cluster named.
    """
    if not ns.jar.is_file():
        msg = f"topology jar {ns.jar} does not exist"
        raise ValueError(msg)
    options = dict(ns.options)
    args = list(ns.args)
    local = ns.command == "local"
    ttl_s: int | None = getattr(ns, "local_ttl", None)
    if ns.main_class == FLUX_MAIN:
        args, storm1_local, sleep_s = translate_flux_args(args)
        if storm1_local:
            local, ttl_s = True, sleep_s
    if local:
        options = {**_lab_options(resolve_lab_dir(ns.lab)), **options}
        return local_command(
            home, ns.jar, ns.main_class, args, ttl_s=ttl_s, options=options
        )
    if ns.config is None and "nimbus.seeds" not in options:
        raise ValueError(E_REMOTE_CONF.format(main=ns.main_class))
    flux = ns.main_class == FLUX_MAIN
    return jar_command(
        home,
        ns.jar,
        ns.main_class,
        args,
        conf_file=ns.config,
        options=options,
        extra_jars=sorted(home.flux.glob("*.jar")) if flux else [],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``storm`` command; return its exit status."""
    ns = _parser().parse_args(argv)
    try:
        home = StormHome.locate()
        if ns.command == "version":
            print(f"Storm {home.version}")
            return 0
        cmd = _command(ns, home)
    except (SR3Error, ValueError) as exc:
        print(f"storm: error: {exc}", file=sys.stderr)
        return 2
    return subprocess.call(cmd)  # noqa: S603 (argv built above, no shell)


if __name__ == "__main__":
    sys.exit(main())
