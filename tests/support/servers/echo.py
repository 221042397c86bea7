"""A TCP echo server for port-forward tests, run as a workload: `python echoserver.py PORT`.

With `source` after the port (benches), each connection instead reads a line `N` and is sent
N zero bytes, then closed. Otherwise every connection gets back what it sends; when the
client half-closes (or closes) its side the server prints `eof after N` (N bytes echoed)
and closes, which tests read from the log to prove a closed client closed the remote side. Not a product module.
"""

from __future__ import annotations

import socket
import sys
import threading


def serve(conn: socket.socket) -> None:
    total = 0
    try:
        while data := conn.recv(65536):
            conn.sendall(data)
            total += len(data)
    except OSError:
        pass
    print(f"eof after {total}", flush=True)
    conn.close()


def source(conn: socket.socket) -> None:
    line = b""
    while not line.endswith(b"\n") and (data := conn.recv(32)):
        line += data
    remaining, chunk = int(line or b"0"), bytes(1 << 20)
    while remaining > 0:
        conn.sendall(chunk[:remaining])
        remaining -= len(chunk)
    conn.close()


def main(port: int, mode: str = "echo") -> None:
    server = socket.create_server(("127.0.0.1", port), backlog=128)
    print(f"listening on {port}", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=source if mode == "source" else serve, args=(conn,), daemon=True).start()


def free_port() -> int:
    """A port nothing listens on now (the kernel does not hand it out again at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    main(int(sys.argv[1]), *sys.argv[2:3])
