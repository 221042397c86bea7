"""Port-forward without a thread per connection: the fixed pool that runs every session's
provider dials, and the pump that moves a detached provider socket on the reactor.

`portforward.SpdyPortForwardProtocol` submits each complete pair's dial to `DIALS` and,
for a `DetachablePortConnection`, adopts the socket with `adopt`; a `SocketPump` then
reaches the session only through the `SocketOutlet` (on the reactor). Never calls a
provider on the reactor, never starts a thread per connection (I7).
Tests: tests/vnode/kubelet/test_port_forward_threads.py, tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Factory
from twisted.internet.protocol import Protocol as TwistedProtocol
from zope.interface import implementer  # type: ignore[import-untyped]

from vnode.kubelet.loop import reactor
from vnode.kubelet.portforward_pair import READ_SIZE, StreamPair

logger = logging.getLogger(__name__)

DIAL_THREADS = 64  # provider dials and closes at once, across every session; more wait their turn
DIAL_LINGER = 10.0  # seconds an idle dial thread waits for another job before it ends


class DialPool:
    """Daemon threads, started as jobs wait and none is idle, at most `size`, that run blocking
    jobs (provider dials and closes) in order; an idle one ends after `linger` seconds. A few
    slow dials (an unreachable VM: 45 s each over SSH) so hold only their own threads, not
    everyone's port-forwards. Shared by the process; `stop` is for tests."""

    def __init__(self, size: int = DIAL_THREADS, linger: float = DIAL_LINGER) -> None:
        self.size = size
        self._linger = linger
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._threads: set[threading.Thread] = set()
        self._idle = 0  # threads waiting for a job
        self._waiting = 0  # jobs no thread has taken yet
        self._lock = threading.Lock()
        self._started = 0

    def submit(self, job: Callable[[], object]) -> None:
        with self._lock:
            self._jobs.put(job)
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self.size:
                self._started += 1
                thread = threading.Thread(target=self._work, name=f"portforward-dial-{self._started}", daemon=True)
                self._threads.add(thread)
                thread.start()

    def threads(self) -> int:
        with self._lock:
            return len(self._threads)

    def stop(self) -> None:
        """Let the threads finish the queued jobs and end; the next `submit` starts them again."""
        with self._lock:
            threads, self._threads = set(self._threads), set()
            for _ in threads:
                self._jobs.put(None)
                self._waiting += 1
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self._linger)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._waiting == 0:  # else a job came as the wait ended: take it
                        self._threads.discard(me)
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            if job is None:
                with self._lock:
                    self._threads.discard(me)
                return
            try:
                job()
            except Exception:
                logger.exception("a port-forward dial job failed")


DIALS = DialPool()


class SocketOutlet(Protocol):
    """What a reactor pump may ask of its session (reactor only)."""

    def forward(self, pair: StreamPair, data: bytes) -> None:
        """DATA from the provider's side to the pair's data stream."""
        ...

    def finish_pair(self, pair: StreamPair, broke: str = "") -> None:
        """The provider's side ended: FIN on both streams, after `broke` (why the connection
        broke, if it did not end cleanly) on the error stream."""
        ...

    def taken(self, size: int) -> None:
        """`size` bytes the client sent have left for the provider (input back-pressure)."""
        ...

    def pump_started(self, pump: SocketPump) -> None:
        """Pause `pump` whenever the session's transport is full (output back-pressure)."""
        ...

    def pump_gone(self, pump: SocketPump) -> None: ...


@implementer(IHalfCloseableProtocol)
class SocketPump(TwistedProtocol):
    """A detached provider socket on the reactor. It is its transport's push producer for
    what the client sends: bytes written while the transport's buffer is over its size are
    counted taken only once it drains, so a slow provider side holds the session's input."""

    transport: Any

    def __init__(self, pair: StreamPair, outlet: SocketOutlet) -> None:
        self.pair = pair
        self._outlet = outlet
        self._full = False
        self._unflushed = 0  # client bytes written while full, not yet counted taken
        self._done = False
        self._finished = False  # no more input will come (the client's FIN, or the provider's)

    # -- Twisted (the socket's side) ----------------------------------------------------------
    def connectionMade(self) -> None:
        self.transport.bufferSize = READ_SIZE  # reads of this size (Twisted's 64 KiB: ~25% slower)
        self.transport.registerProducer(self, True)
        self._outlet.pump_started(self)
        self.pair.sink = self
        for data in self.pair.early_input():
            if data is None:
                self.abort()
                return
            if data:
                self.write(data)
            else:
                self.finish()

    def dataReceived(self, data: bytes) -> None:
        if not self._done:
            self._outlet.forward(self.pair, data)

    def readConnectionLost(self) -> None:
        """The provider's side sent FIN: the pair ends (both streams), as the upstream kubelet
        closes both when its copy returns; what the client sent is still flushed first."""
        self._outlet.finish_pair(self.pair)
        self._let_go()
        self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        self._taken_all()  # shut down for writing: everything the client sent was written

    def connectionLost(self, reason: Any = None) -> None:
        self._done = True
        broke = "" if reason is None or reason.check(ConnectionDone) else str(reason.getErrorMessage())
        self._outlet.finish_pair(self.pair, broke)  # a no-op once the pair has ended (our own abort)
        self._taken_all()
        self._outlet.pump_gone(self)
        self.pair.give_back()

    def hold_output(self, paused: bool) -> None:
        """Stop (or resume) reading the socket while the session's transport is full."""
        if self._done:
            return
        if paused:
            self.transport.pauseProducing()
        else:
            self.transport.resumeProducing()

    # -- IPushProducer for the transport's write buffer ---------------------------------------
    def pauseProducing(self) -> None:
        self._full = True

    def resumeProducing(self) -> None:
        self._full = False
        self._taken_all()

    def stopProducing(self) -> None:
        self._done = True

    # -- InputSink (from the session, on the reactor) -----------------------------------------
    def write(self, data: bytes) -> None:
        if self._done or self._finished or not data:
            self._outlet.taken(len(data))
            return
        self.transport.write(data)
        if self._full:
            self._unflushed += len(data)
        else:
            self._outlet.taken(len(data))

    def finish(self) -> None:
        """The client's FIN: shutdown(SHUT_WR) once what it sent is written."""
        if not self._done:
            self._let_go()
            self.transport.loseWriteConnection()

    def abort(self) -> None:
        """The client's RST_STREAM (or the session went): close the socket now."""
        if not self._done:
            self._done = True
            self.transport.abortConnection()

    def _let_go(self) -> None:
        """No more input: unregister as the write buffer's producer before a (half-)close,
        since a transport whose paused producer is registered resumes it on draining instead
        of closing; what is unflushed is counted taken once written (`writeConnectionLost`)
        or once the socket is gone."""
        if not self._finished:
            self._finished = True
            self.transport.unregisterProducer()

    def _taken_all(self) -> None:
        size, self._unflushed = self._unflushed, 0
        if size:
            self._outlet.taken(size)


class _Adopt(Factory):
    def __init__(self, pump: SocketPump) -> None:
        self._pump = pump

    def buildProtocol(self, addr: Any) -> SocketPump:
        return self._pump


def adopt(sock: socket.socket, pump: SocketPump) -> None:
    """On the reactor: hand a connected stream socket to `pump` (the reactor takes a copy of
    the descriptor; this one is closed here, so the caller keeps nothing)."""
    try:
        sock.setblocking(False)
        reactor.adoptStreamConnection(sock.fileno(), sock.family, _Adopt(pump))
    finally:
        sock.close()
