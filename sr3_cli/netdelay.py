"""A host's link delay without the netem qdisc: hold its packets in NFQUEUE.

Kernels built without ``sch_netem`` (this project's CI machines among them)
cannot add delay with ``tc``. Netfilter's queue can: an ``iptables`` rule in
the host's namespace (:func:`sr3_cli.netns.shape_link`) hands every packet the
host sends or receives on ``eth0`` to queue 0 of that namespace, and this
process, bound to the queue, gives each one back (``NF_ACCEPT``) ``delay_ms``
after it arrived. The kernel keeps the packets; only their ids cross to user
space (``NFQNL_COPY_META``; GSO packets whole), so the cost is a few
microseconds per packet, not per byte. Packets leave in the order they came,
as from a FIFO link: one ``NFQNL_MSG_VERDICT_BATCH`` releases every id up to
the last one due.

The process runs in the root namespace, outside the host: the netlink socket
is made inside the host's namespace (``setns``) and keeps it, so ``sr3 lab
fail HOST``, which kills every process in the host, leaves its link as it was.
The rule has ``--queue-bypass`` and the queue ``FAIL_OPEN``: should this
process die, or fall behind by more than the queue holds, packets pass
undelayed rather than being dropped. On SIGTERM it releases what it holds and
exits.

Run as ``python -m sr3_cli.netdelay --netns NS --delay-ms MS``; it prints
``ready`` once bound, the line :func:`sr3_cli.netns.shape_link` waits for.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import ctypes.util
import errno
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Final

__all__ = ["QUEUE", "MARKER", "Queue", "main"]

#: The queue number the namespace's rules send packets to.
QUEUE: Final = 0
#: What the command line of this process holds, so ``netns`` finds it by name.
MARKER: Final = "sr3_cli.netdelay"

_NETLINK_NETFILTER: Final = 12
_SOL_NETLINK: Final = 270
_NETLINK_NO_ENOBUFS: Final = 5
_CLONE_NEWNET: Final = 0x40000000
_NLM_F_REQUEST: Final = 0x1
_NLM_F_ACK: Final = 0x4
_NLMSG_ERROR: Final = 0x2
_SUBSYS_QUEUE: Final = 3 << 8
_MSG_PACKET: Final = _SUBSYS_QUEUE | 0
_MSG_CONFIG: Final = _SUBSYS_QUEUE | 2
_MSG_VERDICT_BATCH: Final = _SUBSYS_QUEUE | 3
_CFG_CMD: Final = 1
_CFG_PARAMS: Final = 2
_CFG_QUEUE_MAXLEN: Final = 3
_CFG_MASK: Final = 4
_CFG_FLAGS: Final = 5
_CMD_BIND: Final = 1
_COPY_META: Final = 1
_F_FAIL_OPEN: Final = 0x1
_F_GSO: Final = 0x4
_PACKET_HDR: Final = 1
_VERDICT_HDR: Final = 2
_NF_ACCEPT: Final = 1
_MAXLEN: Final = 65536
_RCVBUF: Final = 16 << 20
_NLMSG: Final = struct.Struct("=IHHII")
_NFGEN: Final = struct.Struct("=BBH")
_NLA: Final = struct.Struct("=HH")
_ID: Final = struct.Struct("!I")


def _attr(kind: int, payload: bytes) -> bytes:
    size = _NLA.size + len(payload)
    return _NLA.pack(size, kind) + payload + b"\0" * (-size % 4)


def _message(kind: int, flags: int, seq: int, queue: int, attrs: bytes) -> bytes:
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return _NLMSG.pack(_NLMSG.size + len(body), kind, flags, seq, 0) + body


def packet_ids(data: bytes) -> list[int]:
    """Return the ids of the queued packets a netlink read holds, in order.

    Raises:
        OSError: the kernel answered a request with an error.
    """
    ids: list[int] = []
    offset = 0
    while offset + _NLMSG.size <= len(data):
        size, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, offset)
        if size < _NLMSG.size or offset + size > len(data):
            break
        end = offset + size
        if kind == _NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
            if code:
                raise OSError(-code, os.strerror(-code))
        elif kind == _MSG_PACKET:
            at = offset + _NLMSG.size + _NFGEN.size
            while at + _NLA.size <= end:
                length, attr = _NLA.unpack_from(data, at)
                if length < _NLA.size:
                    break
                if attr & 0x3FFF == _PACKET_HDR:
                    ids.append(_ID.unpack_from(data, at + _NLA.size)[0])
                    break
                at += (length + 3) & ~3
        offset += (size + 3) & ~3
    return ids


class Queue:
    """Queue 0 of one namespace, bound for delaying: ids in, batch verdicts out."""

    def __init__(self, netns: str | None) -> None:
        self.sock = _socket_in(netns)
        self._seq = 0
        self._request(
            _attr(_CFG_CMD, struct.pack("!BBH", _CMD_BIND, 0, socket.AF_INET))
        )
        params = _attr(_CFG_PARAMS, struct.pack("!IB", 0, _COPY_META))
        self._request(params + _attr(_CFG_QUEUE_MAXLEN, struct.pack("!I", _MAXLEN)))
        flags = struct.pack("!I", _F_FAIL_OPEN | _F_GSO)
        self._request(_attr(_CFG_MASK, flags) + _attr(_CFG_FLAGS, flags))

    def _request(self, attrs: bytes) -> None:
        self._seq += 1
        flags = _NLM_F_REQUEST | _NLM_F_ACK
        self.sock.send(_message(_MSG_CONFIG, flags, self._seq, QUEUE, attrs))
        packet_ids(self.sock.recv(8192))  # the ack; raises on an error

    def release(self, last_id: int) -> None:
        """Let every held packet up to ``last_id`` go on."""
        self._seq += 1
        hdr = _attr(_VERDICT_HDR, struct.pack("!II", _NF_ACCEPT, last_id))
        self.sock.send(
            _message(_MSG_VERDICT_BATCH, _NLM_F_REQUEST, self._seq, QUEUE, hdr)
        )


def _socket_in(netns: str | None) -> socket.socket:
    """Open a netfilter netlink socket in namespace ``netns`` (None: this one)."""
    if netns is None:
        return _open_socket()
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns into {netns}: {os.strerror(code)}")
        try:
            return _open_socket()
        finally:
            if libc.setns(home, _CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"setns back: {os.strerror(code)}")
    finally:
        os.close(target)
        os.close(home)


def _open_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE, as root
    sock.setsockopt(_SOL_NETLINK, _NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    return sock


def serve(queue: Queue, delay_s: float, stop: list[bool], wake: socket.socket) -> int:
    """Hold each packet ``delay_s``; return how many were delayed once ``stop``.

    ``wake`` becomes readable when a signal came (``signal.set_wakeup_fd``).
    """
    held: collections.deque[tuple[float, int]] = collections.deque()
    count = 0
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while not stop[0]:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else 1.0
        try:
            ready, _, _ = select.select([queue.sock, wake], [], [], timeout)
        except InterruptedError:
            continue
        if wake in ready:
            wake.recv(64)
        if queue.sock in ready:
            try:
                size = queue.sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                size = 0
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                size = 0
            due = time.monotonic() + delay_s
            for packet in packet_ids(bytes(view[:size])):
                held.append((due, packet))
                count += 1
        now = time.monotonic()
        last = None
        while held and held[0][0] <= now:
            last = held.popleft()[1]
        if last is not None:
            queue.release(last)
    if held:
        queue.release(held[-1][1])
    return count


def main(argv: list[str] | None = None) -> int:
    """Delay one namespace's queued packets until SIGTERM."""
    parser = argparse.ArgumentParser(prog=f"python -m {MARKER}", description=__doc__)
    parser.add_argument("--netns", help="the host's namespace (default: this one)")
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args(argv)
    stop = [False]

    def on_term(_sig: int, _frame: object) -> None:
        stop[0] = True

    wake, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        queue = Queue(args.netns)
    except OSError as exc:
        print(
            f"{MARKER}: cannot bind queue {QUEUE} in {args.netns}: {exc}",
            file=sys.stderr,
        )
        return 1
    print("ready", flush=True)
    count = serve(queue, args.delay_ms / 1000.0, stop, wake)
    print(f"{MARKER}: delayed {count} packets by {args.delay_ms:g} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
