"""A lab's state: its ``lab.json``, read and written only under the lab's lock.

lab.json is changed only by read-modify-write of the current file under the
lab's lock (:meth:`LabState.locked`, :meth:`LabState.update`), so commands
running at once (``sr3 run --kill-node`` and ``sr3 lab restart``, two restarts)
never undo each other's changes. :class:`~sr3_cli.lab.Lab` adds what starts and
stops the lab's processes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from sr3.errors import ConfigError
from sr3_cli.labfile import (
    LabNode,
    external_zk,
    lab_nodes,
    optional_object,
    pid_value,
    port_value,
    write_atomically,
)
from sr3_cli.lockfile import exclusive

__all__ = ["LOCK_TIMEOUT_S", "LabState", "resolve_lab_dir"]

_STATE = "lab.json"
_LOCK = "lab.lock"
#: How long a command waits for another to release the lab's lock: longer than
#: the slowest change (ZooKeeper, nodes and Spark starting, each with a deadline).
LOCK_TIMEOUT_S = 300.0
#: Optional sections of lab.json, each an object or null, read and written as
#: they are (a field of :class:`LabState` of the same name holds each).
_SECTIONS = ("spark", "storm", "kafka", "prometheus", "netns")
_KNOWN_KEYS = frozenset(
    {"zk_port", "zk_pid", "zk_external", "chroot", "nodes", *_SECTIONS}
)


E_NO_LAB = "no lab in {root}: run `sr3 lab up --dir {root}` first"
E_OVERWRITE = (
    "refusing to overwrite the lab's state file {path} with a copy read earlier "
    "(it would undo what other commands changed since); change a lab inside "
    "`with lab.locked():` or `with Lab.update(root) as lab:`"
)
E_LOCK_DIR = (
    "cannot lock the lab in {root} ({exc}); give `--dir` a directory you can write"
)
E_CORRUPT_LAB = (
    "the lab's state file {path} cannot be read ({detail}). Processes it started "
    "may still run: `sr3 lab down --dir {root}` stops them; then move {path} "
    "away and run `sr3 lab up --dir {root}` (node data under {root}/nodes is kept "
    "and adopted)"
)


def resolve_lab_dir(explicit: str | None) -> Path | None:
    """Return the lab dir from ``--lab`` or ``SR3_LAB``, or None."""
    raw = explicit or os.environ.get("SR3_LAB")
    return Path(raw).resolve() if raw else None


@dataclass
class LabState:
    """A lab directory and what its lab.json records.

    Methods that change what runs (``start_*``, ``stop_*``, ``add_nodes`` of
    :class:`~sr3_cli.lab.Lab`) hold the lab's lock and first re-read lab.json,
    so an object loaded long ago (by a run that lasts minutes) never writes back
    what it read then.
    """

    root: Path
    zk_port: int = 0
    zk_pid: int | None = None
    chroot: str = "/sr3/default"
    #: with ``sr3 lab up --zk``: the connect string of a ZooKeeper the lab uses
    #: but neither starts nor stops (``zk_port``, ``zk_pid`` then stay unset)
    zk_external: str | None = None
    nodes: dict[str, LabNode] = field(default_factory=dict)
    spark: dict[str, Any] | None = None
    storm: dict[str, Any] | None = None
    kafka: dict[str, Any] | None = None
    prometheus: dict[str, Any] | None = None
    #: with ``sr3 lab up --netns``: its hosts (:mod:`sr3_cli.lab_netns`)
    netns: dict[str, Any] | None = None
    #: top-level keys of lab.json this version does not know, written back as read
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock_depth: int = field(default=0, init=False, repr=False, compare=False)
    _on_disk: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, root: Path) -> Self:
        """Read ``lab.json`` in ``root`` (to look at; change it with :meth:`update`).

        Raises:
            ConfigError: there is no lab there, or its lab.json cannot be read.
        """
        path = root / _STATE
        if not cls.exists(root):
            raise ConfigError(E_NO_LAB.format(root=root))
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                msg = f"{type(raw).__name__} {raw!r} is not an object"
                raise TypeError(msg)
            lab = cls(
                root=root,
                zk_port=port_value(raw["zk_port"]),
                zk_pid=pid_value(raw.get("zk_pid")),
                chroot=str(raw.get("chroot", "/sr3/default")),
                zk_external=external_zk(raw.get("zk_external")),
                nodes=lab_nodes(raw),
                extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
            )
            for name in _SECTIONS:
                setattr(lab, name, optional_object(name, raw.get(name)))
        except (OSError, UnicodeError, ValueError, TypeError, KeyError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            msg = E_CORRUPT_LAB.format(path=path, root=root, detail=detail)
            raise ConfigError(msg) from exc
        lab._on_disk = True
        return lab

    @staticmethod
    def exists(root: Path) -> bool:
        """Whether ``root`` holds a lab (a ``lab.json``, readable or not)."""
        return os.path.lexists(root / _STATE)

    @classmethod
    @contextmanager
    def update(
        cls, root: Path, *, create: bool = False, timeout_s: float = LOCK_TIMEOUT_S
    ) -> Iterator[Self]:
        """Lock the lab, load the current lab.json, yield it, and save it on exit.

        Args:
            root: The lab dir.
            create: Write a new empty lab when there is none (else refuse).
            timeout_s: How long to wait for another command's lock.

        Raises:
            ConfigError: there is no lab (``create`` unset) or its lab.json
                cannot be read; the dir cannot be written.
            LockTimeoutError: another command held the lock for ``timeout_s``.
        """
        lab = cls(root=root)
        if not root.is_dir():
            raise ConfigError(E_NO_LAB.format(root=root))
        with lab.locked(timeout_s=timeout_s):
            if not lab._on_disk:
                if not create:
                    raise ConfigError(E_NO_LAB.format(root=root))
                lab.save()
            yield lab

    @contextmanager
    def locked(self, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[Self]:
        """Hold the lab's lock; refresh this object from lab.json; save it on exit.

        Re-entrant: only the outermost block locks, re-reads and saves. The save
        happens on errors too, as what was started then runs. Without a lab dir
        (deleted under a running lab) nothing is locked, read or written, so
        processes this object knows can still be stopped.

        Raises:
            ConfigError: lab.json cannot be read, or the lock file not created.
            LockTimeoutError: another command held the lock for ``timeout_s``.
        """
        if self._lock_depth or not self.root.is_dir():
            self._lock_depth += 1
            try:
                yield self
            finally:
                self._lock_depth -= 1
            return
        with ExitStack() as stack:
            try:
                stack.enter_context(exclusive(self.root / _LOCK, timeout_s=timeout_s))
            except OSError as exc:
                msg = E_LOCK_DIR.format(root=self.root, exc=exc)
                raise ConfigError(msg) from exc
            self._on_disk = self.exists(self.root)
            if self._on_disk:
                self._refresh()
            self._lock_depth = 1
            try:
                yield self
            finally:
                self._lock_depth = 0
                if self._on_disk:
                    self._write()

    def _refresh(self) -> None:
        fresh = type(self).load(self.root)
        self.zk_port, self.zk_pid, self.chroot, self.zk_external = (
            fresh.zk_port,
            fresh.zk_pid,
            fresh.chroot,
            fresh.zk_external,
        )
        self.nodes, self.extra = fresh.nodes, fresh.extra
        for name in _SECTIONS:
            setattr(self, name, getattr(fresh, name))

    def save(self) -> None:
        """Write ``lab.json`` atomically, under the lab's lock.

        Inside :meth:`locked` it writes what was read there and changed since;
        outside, it only creates a new lab.

        Raises:
            ConfigError: outside :meth:`locked`, the lab already has a lab.json
                (writing a copy read earlier would undo other commands' changes).
        """
        if self._lock_depth or not self.root.is_dir():
            self._on_disk = True
            self._write()  # without a dir: FileNotFoundError naming the path
            return
        with self.locked():
            if self._on_disk:
                raise ConfigError(E_OVERWRITE.format(path=self.root / _STATE))
            self._on_disk = True

    def _write(self) -> None:
        # temp file + fsync + rename: a reader sees the old file or the new one
        raw: dict[str, Any] = {
            **self.extra,
            "zk_port": self.zk_port,
            "zk_pid": self.zk_pid,
            "chroot": self.chroot,
            "zk_external": self.zk_external,
            "nodes": {k: vars(v) for k, v in self.nodes.items()},
        }
        raw.update({name: getattr(self, name) for name in _SECTIONS})
        write_atomically(self.root / _STATE, json.dumps(raw, indent=2))

    def _checkpoint(self) -> None:
        """Record progress now (pids of processes just started), inside locked()."""
        if self._lock_depth and self._on_disk:
            self._write()
