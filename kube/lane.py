"""Kept connections for the Kubernetes API's plain calls (every request but a watch's stream).

`Kube.request` sends through a `Lane`: connections made by the ApiClient's own urllib3 pool
(so its TLS, client certificate, CA data, server name and socket options hold), spoken to with
http.client directly, because urllib3's request machinery cost as much CPU again as the call
itself (bench/sync.py, issue 37). Never through a proxy: `Lane.of` gives None then. Keeps at
most `maxsize` idle connections; never retries a call that may have reached the server, but one
on a kept connection the server had closed before answering (what Go's client does).
Tests: tests/kube/test_lane.py.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import weakref
from collections import deque
from collections.abc import Mapping

import urllib3
from kubernetes import client as k8s_client

# What a kept connection the server closed while it sat idle says when it is used again:
# sending fails, or the answer's status line finds the connection ended (RemoteDisconnected
# is a ConnectionResetError). The request is sent again once, on a new connection.
_CLOSED_WHILE_IDLE = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError)

_lanes: weakref.WeakKeyDictionary[k8s_client.ApiClient, Lane | None] = weakref.WeakKeyDictionary()
_lanes_lock = threading.Lock()


class Lane:
    """Thread-safe: a connection is used by one call at a time; the idle ones sit in a deque,
    whose append and pop need no lock (a lock every call took would queue the callers)."""

    def __init__(self, pool: urllib3.HTTPConnectionPool, *, maxsize: int) -> None:
        self._pool = pool
        self._maxsize = max(1, maxsize)
        self._idle: deque[http.client.HTTPConnection] = deque()

    @classmethod
    def of(cls, api: k8s_client.ApiClient) -> Lane | None:
        """The lane of `api` (one per ApiClient, shared by its `Kube` objects); None when its
        pool manager goes through a proxy (HTTP or SOCKS), whose requests stay urllib3's."""
        with _lanes_lock:
            if api not in _lanes:
                manager = api.rest_client.pool_manager
                lane = None
                if type(manager) is urllib3.PoolManager:
                    pool = manager.connection_from_url(api.configuration.host)
                    lane = cls(pool, maxsize=api.configuration.connection_pool_maxsize or 1)
                    weakref.finalize(api, lane.close)  # as urllib3's pool closes its own
                _lanes[api] = lane
            return _lanes[api]

    def send(
        self, method: str, target: str, body: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]:
        """(status, body) of one request to `target` (path and query). Raises OSError,
        http.client.HTTPException or urllib3's HTTPError when no whole answer came."""
        conn, kept = self._take()
        try:
            try:
                response = _ask(conn, method, target, body, headers, timeout)
            except _CLOSED_WHILE_IDLE:
                if not kept:
                    raise
                conn.close()  # closed by the server before it answered: sent once more, anew
                conn = self._new()
                response = _ask(conn, method, target, body, headers, timeout)
            data = response.read()
        except BaseException:
            conn.close()
            raise
        self._give(conn, keep=not response.will_close)
        return response.status, data

    def close(self) -> None:
        """Close the idle connections; one in use is closed when its call ends."""
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                return

    def idle(self) -> int:
        return len(self._idle)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """The most recently used idle connection still open (True), else a new one (False)."""
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return self._new(), False
            if _still_open(conn):
                return conn, True
            conn.close()  # the server closed it (or sent something unasked): not reusable

    def _give(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        if not keep:
            conn.close()
            return
        self._idle.append(conn)
        while len(self._idle) > self._maxsize:  # racing givers may each overshoot: trim back
            try:
                self._idle.popleft().close()
            except IndexError:
                return

    def _new(self) -> http.client.HTTPConnection:
        # The pool's own factory: its host, port, TLS settings and socket options.
        conn = self._pool._new_conn()
        if not isinstance(conn, http.client.HTTPConnection):  # urllib3's are http.client's subclasses
            raise TypeError(f"urllib3 made a {type(conn).__name__}, not an http.client connection")
        return conn


def _ask(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    body: bytes | None,
    headers: Mapping[str, str],
    timeout: float,
) -> http.client.HTTPResponse:
    """Send one request over `conn` and read its answer's head, through http.client's own
    methods (the urllib3 subclass's overrides are urllib3's own API, not http.client's)."""
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    http.client.HTTPConnection.request(conn, method, target, body=body, headers=dict(headers))
    return http.client.HTTPConnection.getresponse(conn)


def _still_open(conn: http.client.HTTPConnection) -> bool:
    connected = getattr(conn, "is_connected", None)  # urllib3's: the socket has nothing to read
    return bool(connected) if connected is not None else conn.sock is not None
