"""I7 at the TCP layer of every listener: `ConnectionCaps` refuses a connection at accept, before
TLS, past its client address's cap or the listener's; `outermost` puts TLS inside the caps, and
a connection whose client certificate the client CA verified moves, once its handshake is done,
to the listener's authenticated cap (an API server's one address carries every stream).

Used by `server.Listeners` (kubelet, console) and `wsgilistener.WsgiListener` (metrics). Reads
nothing from a refused connection. Tests: tests/vnode/kubelet/test_listener_limits.py,
tests/vnode/kubelet/test_refusal_log.py, tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from twisted.protocols.policies import WrappingFactory
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOFactory

from vnode.kubelet import certs
from vnode.kubelet.limits import Limits
from vnode.kubelet.loop import reactor

logger = logging.getLogger(__name__)

LOG_EVERY = 10.0  # seconds between two log lines about refused connections


# -- connections ---------------------------------------------------------------------------
class ConnectionCaps(WrappingFactory):
    """Refuses a connection at accept (closed at once, nothing read) past `per_client` from
    its address or `total` in all; says so in the log at most every LOG_EVERY seconds, each
    line counting every refusal since the previous one (the last ones are said LOG_EVERY
    after the previous line, or when the listener stops), never with a traceback.

    A connection the client CA authenticated (`authenticate`, at the end of its handshake)
    leaves `open` (so per_client and total) for `authenticated`, capped at
    `authenticated_total`: past it, it is closed, counted and logged as the others."""

    noisy = False  # no "Starting factory" lines

    def __init__(
        self, wrapped: Any, *, per_client: int, total: int, name: str, authenticated_total: int | None = None
    ) -> None:
        super().__init__(wrapped)  # type: ignore[no-untyped-call]
        self.per_client = per_client
        self.total = total
        self.authenticated_total = authenticated_total if authenticated_total is not None else total
        self.name = name
        self.open: Counter[str] = Counter()  # unauthenticated (or not yet) connections by address
        self.authenticated: set[Any] = set()  # the wrappers of authenticated connections
        self.refused = 0
        self._logged = -LOG_EVERY
        self._unlogged = 0
        self._last_host = ""
        self._pending: Any = None  # the delayed call that says the refusals not yet said

    def buildProtocol(self, addr: Any) -> Any:
        host = str(getattr(addr, "host", addr))
        if self.open[host] >= self.per_client or sum(self.open.values()) >= self.total:
            self._refused(host)
            return None
        return super().buildProtocol(addr)

    def registerProtocol(self, p: Any) -> None:
        self.protocols[p] = 1  # every open connection, for a listener that ends them at stop
        self.open[str(getattr(p.getPeer(), "host", ""))] += 1

    def unregisterProtocol(self, p: Any) -> None:
        self.protocols.pop(p, None)
        if p in self.authenticated:
            self.authenticated.discard(p)
            return
        self._leave(str(getattr(p.getPeer(), "host", "")))

    def authenticate(self, p: Any) -> bool:
        """On the reactor, when `p`'s handshake has verified its client certificate: it
        counts against `authenticated_total` from now on instead of its address's cap and
        `total`. False (counted as refused; the caller closes it) past that cap."""
        if p not in self.protocols or p in self.authenticated:
            return True
        host = str(getattr(p.getPeer(), "host", ""))
        if len(self.authenticated) >= self.authenticated_total:
            self._refused(host)
            return False
        self._leave(host)
        self.authenticated.add(p)
        return True

    def _leave(self, host: str) -> None:
        self.open[host] -= 1
        if self.open[host] <= 0:
            del self.open[host]

    def doStop(self) -> None:
        self._say_refused()
        super().doStop()  # type: ignore[no-untyped-call]

    def _refused(self, host: str) -> None:
        self.refused += 1
        self._unlogged += 1
        self._last_host = host
        wait = self._logged + LOG_EVERY - time.monotonic()
        if wait <= 0:
            self._say_refused()
        elif self._pending is None:
            self._pending = reactor.callLater(wait, self._say_refused)

    def _say_refused(self) -> None:
        if self._pending is not None and self._pending.active():
            self._pending.cancel()
        self._pending = None
        if not self._unlogged:
            return
        logger.warning(
            "%s listener: refused %d connection(s) over the caps (%d per client, %d in all, "
            "%d authenticated by a client certificate); last from %s",
            self.name,
            self._unlogged,
            self.per_client,
            self.total,
            self.authenticated_total,
            self._last_host,
        )
        self._logged, self._unlogged = time.monotonic(), 0


class _TellsHandshake(BufferingTLSTransport):
    """Twisted's server TLS protocol, telling its `ConnectionCaps` when the handshake has
    verified a client certificate (`certs.VERIFY_ERROR` unset on the OpenSSL connection)."""

    def _checkHandshakeStatus(self) -> None:
        done = self._handshakeDone
        super()._checkHandshakeStatus()  # type: ignore[no-untyped-call]
        if done or not self._handshakeDone or self._aborted:
            return
        wrapper = self.transport  # the ConnectionCaps' ProtocolWrapper
        caps = getattr(wrapper, "factory", None)
        if isinstance(caps, ConnectionCaps) and verified(self.getHandle()):  # type: ignore[no-untyped-call]
            if not caps.authenticate(wrapper):
                self.abortConnection()  # type: ignore[no-untyped-call]


class _TLSFactory(TLSMemoryBIOFactory):
    protocol = _TellsHandshake


def verified(handle: Any) -> bool:
    """True when the TLS connection's client presented a certificate its client CA verified."""
    if handle is None or not hasattr(handle, "get_peer_certificate"):
        return False
    return handle.get_peer_certificate(as_cryptography=True) is not None and not getattr(handle, certs.VERIFY_ERROR, 0)


def outermost(factory: Any, *, tls: Any, bounds: Limits, name: str) -> ConnectionCaps:
    """A listener's outermost factory: `factory` behind TLS (when `tls`, a
    `certs.ServerTLS`), the caps outside both, so a refused connection costs no handshake."""
    if tls is not None:
        factory = _TLSFactory(tls, False, factory)  # what SSL4ServerEndpoint does, telling the caps
    return ConnectionCaps(
        factory,
        per_client=bounds.per_client,
        total=bounds.total,
        authenticated_total=bounds.authenticated_total,
        name=name,
    )
