"""The injectors of the network-namespace faults of ``sr3 chaos --netns-faults``.

``partition-node``: the host of the fault's ring node is cut off from every
other host and from the CLI's namespace (:func:`sr3_cli.lab_netns.partition`),
then healed. ``netem-slow``: every host's link is shaped to the fault's target
(:data:`sr3_cli.chaos.SLOW_LINK`), then the lab's own shape comes back. Both
need a lab started with ``sr3 lab up --netns``.
"""

from __future__ import annotations

from collections.abc import Callable

from sr3.errors import ConfigError
from sr3_cli import lab_netns
from sr3_cli.chaos import Fault
from sr3_cli.lab import Lab
from sr3_cli.netns import LinkShape

__all__ = ["E_NOT_NETNS", "end_netns_faults", "netns_events", "require_netns"]

Event = tuple[float, Callable[[Lab], object], str]

E_NOT_NETNS = (
    "--netns-faults draws partition-node and netem-slow faults, which need a lab "
    "on network-namespace hosts: start one with `sudo sr3 lab up --netns --dir "
    "DIR` and pass --lab DIR"
)


def require_netns(lab: Lab) -> None:
    """Refuse a loopback lab for a campaign with netns faults.

    Raises:
        ConfigError: the lab has no hosts.
    """
    if lab.netns is None:
        raise ConfigError(E_NOT_NETNS)


def _partition(node: str) -> Callable[[Lab], object]:
    def act(lab: Lab) -> object:
        record = lab.netns or {}
        return lab_netns.partition(lab, lab_netns.node_host(record, node))

    return act


def _slow(shape: str) -> Callable[[Lab], object]:
    def act(lab: Lab) -> object:
        lab_netns.shape_all(lab, LinkShape.parse(shape))
        return None

    return act


def netns_events(fault: Fault) -> list[Event]:
    """Return the start and end actions of a netns fault, at seconds into the run."""
    end = fault.at_s + fault.down_s
    if fault.kind == "partition-node":
        return [
            (fault.at_s, _partition(fault.target), fault.describe()),
            (end, lab_netns.heal, "heal"),
        ]
    return [
        (fault.at_s, _slow(fault.target), fault.describe()),
        (end, lab_netns.restore_shape, "restore the links"),
    ]


def end_netns_faults(lab: Lab) -> None:
    """Heal every partition and restore the links' shape (a run's end)."""
    lab_netns.heal(lab)
    lab_netns.restore_shape(lab)
