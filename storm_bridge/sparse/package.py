"""The topology jar ``sparse submit`` ships, built without Leiningen or Maven.

A pure-Python streamparse topology needs nothing from the JVM in its jar: Storm's
supervisor extracts the jar's ``resources/`` directory into the topology's code
dir, and each ShellBolt/ShellSpout starts ``streamparse_run module.Class`` there.
:func:`build_jar` writes that jar with :mod:`zipfile`: ``resources/`` holds the
topology file, the Python modules and packages beside it and a streamparse
project's ``src/``, exactly what ``sparse jar`` (``lein jar`` of ``src/``) puts
in it. ``jvm/topology/pom.xml`` builds the same layout with Maven.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from topology_api.errors import TopologyError

__all__ = ["RESOURCES", "build_jar", "resource_files"]

#: The jar directory Storm extracts for multilang components.
RESOURCES: Final = "resources"
_MANIFEST: Final = (
    "Manifest-Version: 1.0\r\nCreated-By: sr3 (storm_bridge.sparse)\r\n\r\n"
)
_SKIPPED_DIRS: Final = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache"})
_SUFFIXES: Final = frozenset({".py", ".json", ".txt", ".yaml", ".yml", ".csv"})


def _walk(root: Path) -> Iterator[Path]:
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in _SKIPPED_DIRS:
            continue
        if path.is_dir():
            if (path / "__init__.py").is_file():
                yield from _walk(path)
        elif path.suffix in _SUFFIXES:
            yield path


def resource_files(topology_file: Path) -> dict[str, Path]:
    """Return what goes under ``resources/``: archive name -> file.

    The topology file's directory (its modules and packages: streamparse names a
    component ``module.Class`` after the module defining it), then, in a
    streamparse project (``topologies/`` beside ``src/``), ``src/``.

    Raises:
        TopologyError: the topology file does not exist.
    """
    topology_file = Path(topology_file).resolve()
    if not topology_file.is_file():
        msg = f"topology file {topology_file} does not exist"
        raise TopologyError(msg)
    files: dict[str, Path] = {}
    roots = [topology_file.parent]
    src = topology_file.parent.parent / "src"
    if src.is_dir() and src.resolve() != topology_file.parent:
        roots.append(src)
    for root in roots:
        for path in _walk(root):
            files.setdefault(path.relative_to(root).as_posix(), path)
    return files


def build_jar(topology_file: Path, jar: Path) -> Path:
    """Write the topology jar of ``topology_file`` to ``jar``; return its path.

    Raises:
        TopologyError: the topology file does not exist.
        OSError: ``jar`` cannot be written.
    """
    files = resource_files(topology_file)
    jar = Path(jar)
    jar.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(jar, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("META-INF/MANIFEST.MF", _MANIFEST)
        archive.writestr(f"{RESOURCES}/", "")
        for name, path in files.items():
            archive.write(path, f"{RESOURCES}/{name}")
    return jar
