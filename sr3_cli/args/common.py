"""What the sub-commands' parsers share: lazy handlers and common options."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Handler",
    "LazyHandler",
    "add_cluster_args",
    "conf_arg",
    "handler",
    "lab_dir_arg",
    "schedule_arg",
]

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class LazyHandler:
    """A sub-command's handler, imported from ``module`` when it is called.

    Building the parser names every handler, but only the one that runs loads
    its module (and whatever engine or client library that module imports).
    """

    module: str
    name: str

    def __call__(self, args: argparse.Namespace) -> int:
        """Import the handler's module and run the handler on ``args``."""
        target: Handler = getattr(importlib.import_module(self.module), self.name)
        return target(args)


def handler(target: str) -> LazyHandler:
    """Return the handler ``"module:function"``, imported when it is called."""
    module, _, name = target.partition(":")
    return LazyHandler(module, name)


def conf_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Add ``-o KEY=VALUE`` (repeatable) into ``args.conf``, as sparse -o."""
    parser.add_argument(
        "-o",
        dest="conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=help_text,
    )


def schedule_arg(
    parser: argparse.ArgumentParser, flag: str, metavar: str, help_text: str
) -> None:
    """Add a repeatable ``flag WHAT@SECONDS`` fault option (a list, default empty)."""
    parser.add_argument(
        flag,
        action="extend",
        nargs="+",
        default=[],
        metavar=metavar,
        help=help_text,
    )


def lab_dir_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir`` (the lab dir) to a ``sr3 lab`` sub-command."""
    parser.add_argument(
        "--dir",
        dest="lab_dir",
        default=None,
        help="lab dir (default: $SR3_LAB or ./lab)",
    )


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--lab``, ``--zk``, ``--chroot`` and ``--secret-file``."""
    parser.add_argument("--lab", help="lab dir (default: $SR3_LAB)")
    parser.add_argument(
        "--zk", help="ZooKeeper HOST:PORT[,HOST:PORT] of a real ensemble"
    )
    parser.add_argument(
        "--chroot", default=None, help="cluster root znode (/sr3/default)"
    )
    parser.add_argument("--secret-file", help="ring secret file (default: the lab's)")
