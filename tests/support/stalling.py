"""Byte streams for the back-pressure tests of detached port-forward sockets (the fake cloud's
echo, the SSH forward): a recognisable pattern, a sender that stops once the socket stays
full, and a reader to EOF. Used by tests/providers/fake/test_fake_forward.py and
tests/providers/ssh/test_ssh_forward.py; never asserts.
"""

from __future__ import annotations

import select
import socket

STALL = 5.0  # seconds without room to send after which a sender counts as stalled (a wait, not an assertion)
BOUND = 64 << 20  # far more than every buffer on the path holds; a pump that never pauses takes any amount


def pattern(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def read_to_eof(sock: socket.socket) -> bytes:
    out = bytearray()
    while data := sock.recv(65536):
        out += data
    return bytes(out)


def send_until_stalled(sock: socket.socket) -> int:
    """Bytes accepted before `sock` stayed full for STALL seconds (or BOUND was passed)."""
    sock.setblocking(False)
    chunk = pattern(1 << 20)  # 1 MiB, a multiple of 256 so the pattern runs on across sends
    poller = select.poll()  # not select(): a test process may hold descriptors past 1024
    poller.register(sock, select.POLLOUT)
    sent = 0
    while sent < BOUND:
        try:
            sent += sock.send(chunk[sent % len(chunk) :])
        except BlockingIOError:
            if not poller.poll(STALL * 1000):
                return sent
    return sent
