"""Daemon ports lie outside the kernel's ephemeral range (sr3.net)."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from sr3 import net
from sr3.net import bindable, ephemeral_ports, free_port


def test_ports_handed_to_daemons_are_never_ephemeral_ports() -> None:
    # a client's outgoing local port comes from the ephemeral range: a daemon
    # port outside it can never be taken by one, nor be its own peer
    ephemeral = ephemeral_ports()
    ports = [free_port() for _ in range(50)]
    assert not [p for p in ports if p in ephemeral], ephemeral
    assert len(set(ports)) == len(ports), "a port was handed out twice"


def test_a_port_handed_out_can_be_bound_by_its_daemon() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)) as server:
        assert server.getsockname()[1] == port


def test_a_port_in_use_is_skipped_and_the_kernel_picks_when_none_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a kernel whose ephemeral range leaves one daemon port: 10000
    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("10001\t65535\n")
    monkeypatch.setattr(net, "_EPHEMERAL_RANGE", port_range)
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # held by another process: as good
            holder.bind(("127.0.0.1", 10000))
        port = free_port()
    assert port != 10000
    assert port in ephemeral_ports()


def test_the_ephemeral_range_is_the_kernels() -> None:
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    low, high = (int(v) for v in text.split())
    assert ephemeral_ports() == range(low, high + 1)


def test_a_listening_port_is_not_bindable_in_either_mode() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert not bindable("127.0.0.1", port)
        assert not bindable("127.0.0.1", port, ignore_time_wait=True)
    assert bindable("127.0.0.1", port)


def test_a_time_wait_leftover_counts_only_when_asked() -> None:
    # the side that closes first keeps TIME_WAIT: here the accepted socket
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()
        client.recv(1)  # the FIN arrived
        client.close()
    assert bindable("127.0.0.1", port, ignore_time_wait=True)
    assert not bindable("127.0.0.1", port)


def test_an_address_not_of_this_machine_is_an_error_not_a_taken_port() -> None:
    with pytest.raises(OSError, match="assign"):
        bindable("192.0.2.1", 10000)
