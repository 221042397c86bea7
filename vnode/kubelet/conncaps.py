"""I7 at the TCP layer of every listener: `ConnectionCaps` refuses a connection at accept, before
TLS, past its client address's cap or the listener's; `outermost` puts TLS inside the caps.

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
from twisted.protocols.tls import TLSMemoryBIOFactory

from vnode.kubelet.limits import Limits
from vnode.kubelet.loop import reactor

logger = logging.getLogger(__name__)

LOG_EVERY = 10.0  # seconds between two log lines about refused connections


# -- connections ---------------------------------------------------------------------------
class ConnectionCaps(WrappingFactory):
    """Refuses a connection at accept (closed at once, nothing read) past `per_client` from
    its address or `total` in all; says so in the log at most every LOG_EVERY seconds, each
    line counting every refusal since the previous one (the last ones are said LOG_EVERY
    after the previous line, or when the listener stops), never with a traceback."""

    noisy = False  # no "Starting factory" lines

    def __init__(self, wrapped: Any, *, per_client: int, total: int, name: str) -> None:
        super().__init__(wrapped)  # type: ignore[no-untyped-call]
        self.per_client = per_client
        self.total = total
        self.name = name
        self.open: Counter[str] = Counter()
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
        host = str(getattr(p.getPeer(), "host", ""))
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
            "%s listener: refused %d connection(s) over the caps (%d per client, %d in all); last from %s",
            self.name,
            self._unlogged,
            self.per_client,
            self.total,
            self._last_host,
        )
        self._logged, self._unlogged = time.monotonic(), 0


def outermost(factory: Any, *, tls: Any, bounds: Limits, name: str) -> ConnectionCaps:
    """A listener's outermost factory: `factory` behind TLS (when `tls`, a
    `certs.ServerTLS`), the caps outside both, so a refused connection costs no handshake."""
    if tls is not None:
        factory = TLSMemoryBIOFactory(tls, False, factory)  # what SSL4ServerEndpoint does
    return ConnectionCaps(factory, per_client=bounds.per_client, total=bounds.total, name=name)
