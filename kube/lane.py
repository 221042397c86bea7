"""Kept connections for the Kubernetes API's plain calls (every request but a watch's stream).

`Kube.request` sends through a `Lane`: connections made by the ApiClient's own urllib3 pool
(so its TLS, client certificate, CA data, server name and socket options hold), spoken to with
http.client directly, because urllib3's request machinery cost as much CPU again as the call
itself (bench/sync.py, issue 37). Never through a proxy: `Lane.of` gives None then. Keeps at
most `maxsize` idle connections. A call on a kept connection the server had closed is sent once
more on a new one only when the server cannot have acted on it (its sending failed), or when it
is a GET (Go's client's rule); no connect is retried (the caller's queue retries with backoff).
Tests: tests/kube/test_lane.py.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import urllib3
from kubernetes import client as k8s_client

# What a kept connection the server closed while it sat idle says when it is used again:
# sending fails, or the answer's status line finds the connection ended (RemoteDisconnected
# is a ConnectionResetError).
_CLOSED_WHILE_IDLE = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
# Sent again, after the server may have read them, only these (Go's net/http: isReplayable); any
# request whose sending failed, since a server acts on no request it did not read whole.
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

_lanes: weakref.WeakKeyDictionary[k8s_client.ApiClient, Lane | None] = weakref.WeakKeyDictionary()
_lanes_lock = threading.Lock()


class Lane:
    """Thread-safe: a connection is used by one call at a time; the idle ones sit in a deque,
    whose append and pop need no lock (a lock every call took would queue the callers)."""

    def __init__(self, pool: urllib3.HTTPConnectionPool, *, maxsize: int, prefix: str = "") -> None:
        self._pool = pool
        self._maxsize = max(1, maxsize)
        self._prefix = prefix  # the server address's own path (an API behind a path), before each target
        self._idle: deque[http.client.HTTPConnection] = deque()
        self._generation = 0  # counts `close` calls: a connection taken before one is not kept after

    @classmethod
    def of(cls, api: k8s_client.ApiClient) -> Lane | None:
        """The lane of `api` (one per ApiClient, shared by its `Kube` objects); None when its
        pool manager goes through a proxy (HTTP or SOCKS), whose requests stay urllib3's."""
        with _lanes_lock:
            if api not in _lanes:
                manager = api.rest_client.pool_manager
                lane = None
                if type(manager) is urllib3.PoolManager:
                    host = api.configuration.host
                    pool = manager.connection_from_url(host)
                    prefix = urlsplit(host).path.rstrip("/")
                    lane = cls(pool, maxsize=api.configuration.connection_pool_maxsize or 1, prefix=prefix)
                    weakref.finalize(api, lane.close)  # as urllib3's pool closes its own
                _lanes[api] = lane
            return _lanes[api]

    def send(
        self, method: str, target: str, body: bytes | None, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]:
        """(status, body) of one request to `target` (path and query), within `timeout` seconds
        from now for connecting, sending and the answer's head (the body's reads get what is left,
        as urllib3's total timeout gives them). Raises OSError (TimeoutError once the time is
        spent), http.client.HTTPException or urllib3's HTTPError when no whole answer came."""
        deadline = time.monotonic() + timeout
        generation = self._generation
        conn, kept = self._take()
        target = self._prefix + target
        sent = False
        try:
            try:
                _send(conn, method, target, body, headers, deadline)
                sent = True
                response = _answer(conn, deadline)
            except _CLOSED_WHILE_IDLE:
                if not kept or (sent and method not in REPLAYABLE):
                    raise  # the server may have acted on it: the caller decides whether to ask again
                conn.close()  # nothing it could have acted on (or a GET): once more, on a new one
                conn = self._new()
                _send(conn, method, target, body, headers, deadline)
                response = _answer(conn, deadline)
            _within(conn, deadline)
            data = response.read()
        except BaseException:
            conn.close()
            raise
        self._give(conn, keep=not response.will_close and generation == self._generation)
        return response.status, data

    def close(self) -> None:
        """Close the idle connections; one in use is closed when its call ends."""
        self._generation += 1
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


def _within(conn: http.client.HTTPConnection, deadline: float) -> None:
    """The time left before `deadline` as `conn`'s timeout (its connect's too); TimeoutError
    once none is left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's time ran out")
    conn.timeout = left
    if conn.sock is not None:
        conn.sock.settimeout(left)


def _send(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    body: bytes | None,
    headers: Mapping[str, str],
    deadline: float,
) -> None:
    """Connect if need be and send one request, through http.client's own methods (the urllib3
    subclass's overrides are urllib3's own API, not http.client's)."""
    _within(conn, deadline)
    http.client.HTTPConnection.request(conn, method, target, body=body, headers=dict(headers))


def _answer(conn: http.client.HTTPConnection, deadline: float) -> http.client.HTTPResponse:
    """The answer's status line and headers."""
    _within(conn, deadline)
    return http.client.HTTPConnection.getresponse(conn)


def _still_open(conn: http.client.HTTPConnection) -> bool:
    connected = getattr(conn, "is_connected", None)  # urllib3's: the socket has nothing to read
    return bool(connected) if connected is not None else conn.sock is not None
