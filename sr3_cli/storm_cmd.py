"""``sr3 lab up --storm``: the lab, then its real Apache Storm cluster.

It wraps :func:`sr3_cli.commands.lab_up`. ``sr3 lab down`` needs no wrapper:
:meth:`Lab.stop` stops the Storm cluster (workers included) first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sr3_cli import commands
from sr3_cli.lab import Lab, resolve_lab_dir
from sr3_cli.lab_storm import start_storm

__all__ = ["lab_up"]


def _lab_root(args: argparse.Namespace) -> Path:
    # as every `sr3 lab` command: --dir, else $SR3_LAB, else ./lab
    return resolve_lab_dir(args.lab_dir) or Path("lab").resolve()


def lab_up(args: argparse.Namespace) -> int:
    """``sr3 lab up [--storm]``: the lab, then its Storm cluster when asked."""
    code = commands.lab_up(args)
    if code != 0 or not args.storm:
        return code
    lab = Lab.load(_lab_root(args))
    cluster = start_storm(
        lab,
        supervisors=args.supervisors,
        slots=args.storm_slots,
        nimbus_port=args.nimbus_port,
    )
    info = cluster.info
    slots = len(info.supervisors[0].slots)
    print(
        f"Apache Storm {info.version}: Nimbus {info.nimbus}, "
        f"{len(info.supervisors)} supervisor(s) x {slots} slots, "
        f"storm.yaml {info.conf_file}; no UI (storm-webapp is not on Maven Central)"
    )
    from storm_bridge.apache import DEFAULT_NIMBUS_PORT  # noqa: PLC0415 (fast --help)

    if args.nimbus_port is None and info.nimbus_port != DEFAULT_NIMBUS_PORT:
        print(
            f"note: port {DEFAULT_NIMBUS_PORT} was taken, so Nimbus listens on "
            f"{info.nimbus_port}: point config.json's env `lab` there "
            f'("nimbus": "{info.nimbus}"), or free {DEFAULT_NIMBUS_PORT} and run '
            "`sr3 lab down` and `sr3 lab up --storm` again"
        )
    return 0
