"""`WsgiListener`: a WSGI app on a port of its own, bounded as the kubelet and console listeners are (I7).

On the process's one Twisted reactor (`loop`): a twisted.web `Site` over a `WSGIResource` whose
app runs on a FIXED pool of POOL_THREADS threads (its only threads; no thread per connection),
wrapped in `conncaps.ConnectionCaps` (outside TLS), each channel `limits.arm`ed, each request a
`limits.BoundedRequest`. Served by `nebula_site.manager.listeners.MetricsListener` (the metrics
listener); never runs the app on the reactor thread. Tests: tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet import endpoints
from twisted.internet.error import CannotListenError
from twisted.python.threadpool import ThreadPool
from twisted.web import server
from twisted.web.wsgi import WSGIResource

from vnode.kubelet import certs, conncaps, limits, loop
from vnode.kubelet.limits import Limits

logger = logging.getLogger(__name__)

POOL_THREADS = 4  # the app's threads (a blocking call holds one): the listener's only threads
BACKLOG = 511  # a burst of connections waits in the kernel's queue (the caps apply at accept), not in SYN retries
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class BoundedWsgiRequest(limits.BoundedRequest, server.Request):
    """twisted.web's request, its body and deadlines bounded as on the kubelet listener."""


class _Site(server.Site):
    """The WSGI resource as a twisted.web site; each connection's channel `limits.arm`ed."""

    noisy = False  # no "Starting factory" lines

    def __init__(self, resource: WSGIResource, bounds: Limits, name: str) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            resource, requestFactory=BoundedWsgiRequest, timeout=None, reactor=loop.reactor
        )
        self.bounds = bounds  # Twisted's own idle timer is off (timeout=None): `limits` owns every deadline
        self.name = name
        self.budget = limits.BodyBudget(bounds.bodies_in_flight)

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)  # type: ignore[no-untyped-call]
        limits.arm(protocol._channel, self.bounds, self.name, self.budget)  # head, body, deadlines
        return protocol

    def log(self, request: Any) -> None:  # one access-log line per request is noise
        pass


class _DaemonThread(threading.Thread):
    """A pool thread that never holds the process open (a call stuck at exit)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, daemon=True, **kwargs)


class _Pool(ThreadPool):
    threadFactory = _DaemonThread


class WsgiListener:
    """`app` on `host:port` (empty host: every IPv4 interface, "::" every IPv6 one; port 0: any
    free one), over TLS with `cert` (PEM certificate and key files), bounded by `bounds`
    (default `Limits()`); `name` is the listener's in `limits` (its body limit, log lines)."""

    def __init__(
        self,
        host: str,
        port: int,
        app: WsgiApp,
        *,
        name: str,
        cert: tuple[str, str] | None = None,
        bounds: Limits | None = None,
    ) -> None:
        self.host, self.requested_port = host, port
        self.app = app
        self.name = name
        self.cert = cert
        self.bounds = bounds or Limits()
        self._port: Any = None
        self._caps: conncaps.ConnectionCaps | None = None
        self._pool: ThreadPool | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.cert is not None else "http"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"the {self.name} listener is not started")
        return int(self._port.getHost().port)

    def held(self) -> int:
        """The connections open right now (counted on the reactor, as the caps count them)."""
        caps = self._caps
        return 0 if caps is None else loop.on_reactor(lambda: sum(caps.open.values()))

    def start(self) -> None:
        """Bind and serve on the reactor. Raises OSError (the address in use: its errno) or
        ValueError naming a certificate or key file that does not load."""
        tls = certs.ServerTLS(certs.load_pair(*self.cert)) if self.cert is not None else None
        loop.ensure_running()
        pool = _Pool(minthreads=0, maxthreads=POOL_THREADS, name=self.name)
        pool.start()
        try:
            self._port = loop.on_reactor(self._listen, pool, tls)
        except CannotListenError as exc:
            _stop_pool(pool, 5.0)
            if isinstance(exc.socketError, OSError):
                raise exc.socketError from exc
            raise OSError(str(exc)) from exc
        except BaseException:
            _stop_pool(pool, 5.0)
            raise
        self._pool = pool

    def _listen(self, pool: ThreadPool, tls: certs.ServerTLS | None) -> Any:
        resource = WSGIResource(loop.reactor, pool, self.app)  # type: ignore[no-untyped-call]
        site = _Site(resource, self.bounds, self.name)
        caps = self._caps = conncaps.outermost(site, tls=tls, bounds=self.bounds, name=self.name)
        kind = endpoints.TCP6ServerEndpoint if ":" in self.host else endpoints.TCP4ServerEndpoint
        endpoint = kind(loop.reactor, self.requested_port, backlog=BACKLOG, interface=self.host or "0.0.0.0")
        return endpoint.listen(caps)  # type: ignore[no-untyped-call]

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening, end every open connection, then stop the pool (waits at most
        `timeout` seconds for each)."""
        port, pool, caps = self._port, self._pool, self._caps
        self._port = self._pool = None
        if port is not None:
            try:
                loop.on_reactor(_close, port, caps, timeout=timeout)
            except TimeoutError as exc:
                logger.warning("%s listener: %s; stopping anyway", self.name, exc)
        if pool is not None:
            _stop_pool(pool, timeout)


def _close(port: Any, caps: conncaps.ConnectionCaps | None) -> Any:
    for wrapper in list(caps.protocols if caps is not None else ()):
        if wrapper.transport is not None:
            wrapper.transport.abortConnection()
    return port.stopListening()


def _stop_pool(pool: ThreadPool, timeout: float) -> None:
    """`pool.stop` joins its threads: off the reactor (a thread may be waiting on it to write
    an answer), at most `timeout` seconds (a call may hang)."""
    stopper = threading.Thread(target=pool.stop, name="wsgi-pool-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
