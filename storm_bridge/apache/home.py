"""Where Apache Storm's jars live: the STORM_HOME that ``scripts/fetch-jars.sh`` fills.

``jvm/storm/pom.xml`` pins the release (its ``<storm.version>``); the script
resolves it from Maven Central into ``.cache/storm-<version>/`` at the
repository root (``SR3_CACHE_DIR`` moves the cache). This module finds that
directory, checks it is complete, and finds ``java``; it downloads nothing.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storm_bridge.errors import StormBridgeError

__all__ = [
    "REPO_ROOT",
    "StormHome",
    "StormMissingError",
    "java_binary",
    "pinned_version",
]

#: The repository root (this file is ``storm_bridge/apache/home.py``).
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
POM: Final = REPO_ROOT / "jvm" / "storm" / "pom.xml"
FETCH_SCRIPT: Final = REPO_ROOT / "scripts" / "fetch-jars.sh"
#: The jar each STORM_HOME directory must hold for Storm to start.
_REQUIRED: Final = {
    "lib": "storm-server-{v}.jar",
    "lib-worker": "storm-client-{v}.jar",
}

E_NOT_FETCHED = (
    "Apache Storm {version} is not fetched: {missing} is missing. Run "
    "`scripts/fetch-jars.sh` (or `make setup`), which resolves it from Maven "
    "Central into {home}"
)
E_NO_JAVA = (
    "java not found ({where}): Apache Storm {version} needs Java 17+; install it "
    "with `apt-get install openjdk-17-jre-headless` or point JAVA_HOME at a JDK"
)


class StormMissingError(StormBridgeError):
    """Storm's jars or Java, needed to run Apache Storm daemons, are missing."""


def pinned_version(pom: Path = POM) -> str:
    """Return the Storm release ``jvm/storm/pom.xml`` pins.

    Raises:
        StormMissingError: the pom is missing or has no ``<storm.version>``.
    """
    try:
        text = pom.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {pom} ({exc}): it pins the Apache Storm release"
        raise StormMissingError(msg) from exc
    match = re.search(r"<storm\.version>\s*([^<\s]+)\s*</storm\.version>", text)
    if match is None:
        msg = f"{pom} has no <storm.version>; restore the property"
        raise StormMissingError(msg)
    return match.group(1)


def java_binary(java_home: str | None = None) -> str:
    """Return the ``java`` to run: ``$JAVA_HOME/bin/java`` if set, else on PATH.

    Args:
        java_home: Overrides ``JAVA_HOME`` (None: read the environment).

    Raises:
        StormMissingError: that java does not exist (the message says where
            it looked).
    """
    home = os.environ.get("JAVA_HOME") if java_home is None else java_home
    version = pinned_version()
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        where = f"JAVA_HOME={home} has no executable bin/java"
        raise StormMissingError(E_NO_JAVA.format(where=where, version=version))
    found = shutil.which("java")
    if found is None:
        where = "JAVA_HOME is unset and `java` is not on PATH"
        raise StormMissingError(E_NO_JAVA.format(where=where, version=version))
    return found


@dataclass(frozen=True)
class StormHome:
    """A fetched STORM_HOME: ``lib/``, ``lib-worker/``, ``external/flux/``, ``log4j2/``.

    Attributes:
        root: The directory (``.cache/storm-<version>``).
        version: The Storm release in it.
    """

    root: Path
    version: str

    @classmethod
    def locate(cls, cache_dir: Path | None = None) -> StormHome:
        """Return the fetched home of the pinned release, checked complete.

        Args:
            cache_dir: Where the fetch script writes (default ``SR3_CACHE_DIR``
                or ``<repo>/.cache``).

        Raises:
            StormMissingError: not fetched, or fetched only in part; the
                message names the missing file and the command that fetches it.
        """
        version = pinned_version()
        if cache_dir is None:
            raw = os.environ.get("SR3_CACHE_DIR")
            cache_dir = Path(raw) if raw else REPO_ROOT / ".cache"
            if not cache_dir.is_absolute():
                cache_dir = REPO_ROOT / cache_dir
        home = cls(root=cache_dir.resolve() / f"storm-{version}", version=version)
        home.check()
        return home

    def check(self) -> None:
        """Check that every directory and file Storm needs is there.

        Raises:
            StormMissingError: the first missing one, named.
        """
        needed = [
            self.root / d / f.format(v=self.version) for d, f in _REQUIRED.items()
        ]
        needed += [self.cluster_log_config, self.worker_log_config, self.extlib]
        for path in needed:
            if not path.exists():
                msg = E_NOT_FETCHED.format(
                    version=self.version, missing=path, home=self.root
                )
                raise StormMissingError(msg)

    @property
    def lib(self) -> Path:
        """Daemon classpath: storm-server and its dependencies."""
        return self.root / "lib"

    @property
    def lib_worker(self) -> Path:
        """What the supervisor puts on every worker's classpath (storm-client)."""
        return self.root / "lib-worker"

    @property
    def extlib(self) -> Path:
        """Extra jars for workers and clients (empty)."""
        return self.root / "extlib"

    @property
    def extlib_daemon(self) -> Path:
        """Extra jars for the daemons (empty)."""
        return self.root / "extlib-daemon"

    @property
    def flux(self) -> Path:
        """flux-core, flux-wrappers and commons-cli."""
        return self.root / "external" / "flux"

    @property
    def log4j2(self) -> Path:
        """The log4j2 configs dir (``storm.log4j2.conf.dir`` defaults to it)."""
        return self.root / "log4j2"

    @property
    def cluster_log_config(self) -> Path:
        """log4j2 config of nimbus, supervisors and clients."""
        return self.log4j2 / "cluster.xml"

    @property
    def worker_log_config(self) -> Path:
        """log4j2 config the supervisor gives its workers."""
        return self.log4j2 / "worker.xml"

    def daemon_classpath(self, conf_dir: Path) -> str:
        """Classpath of nimbus and supervisors (``lib/*`` plus the conf dir)."""
        parts = [self.lib / "*", self.extlib / "*", self.extlib_daemon / "*", conf_dir]
        return os.pathsep.join(str(p) for p in parts)

    def client_classpath(self, conf_dir: Path | None, *jars: Path) -> str:
        """Classpath of a ``storm jar``-style client: ``lib-worker/*``, ``jars``."""
        parts: list[Path] = [self.lib_worker / "*", self.extlib / "*", *jars]
        if conf_dir is not None:
            parts.append(conf_dir)
        return os.pathsep.join(str(p) for p in parts)
