"""Backpressure for streamed HTTP responses (`kubectl logs`, above all `logs -f`).

Daphne hands every `http.response.body` message to Twisted at once, however slowly the
client reads, so a 10 GB log sent to a stalled client would sit in this process's
memory. `ResponseFlow` registers as the request's push producer: Twisted pauses it when
the connection's send buffer fills and resumes it when the buffer drains, and its `send`
waits (on the event loop) while paused. The provider's stream is then read no faster
than the client takes it.
Tests: tests/vnode/kubelet/test_listeners.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]


class ResponseFlow:
    """One HTTP response's flow control (a Twisted IPushProducer). `send` is the ASGI `send` for the request; the
    producer methods are called by Twisted on the reactor, which is the event loop's thread."""

    def __init__(self, request: Any, deliver: Callable[[Message], Awaitable[None]]) -> None:
        self._request = request  # Daphne's WebRequest: a twisted.web Request
        self._deliver = deliver
        self._writable = asyncio.Event()
        self._writable.set()
        self._registered = False

    # -- IPushProducer ---------------------------------------------------------------------------
    def pauseProducing(self) -> None:
        self._writable.clear()

    def resumeProducing(self) -> None:
        self._writable.set()

    def stopProducing(self) -> None:
        # The connection is going: let the application run on and learn it from `receive`.
        self._writable.set()

    # -- ASGI ------------------------------------------------------------------------------------
    async def send(self, message: Message) -> None:
        kind = message.get("type")
        last = kind == "http.response.body" and not message.get("more_body")
        if last:
            self._unregister(None)  # before Twisted finishes the request, which wants it gone
        await self._deliver(message)
        if kind == "http.response.start" and self._can_register():
            self._request.registerProducer(self, True)
            self._registered = True
            # Unregister when the response ends or the connection drops, so the next
            # request on a kept-alive connection can register its own.
            self._request.notifyFinish().addBoth(self._unregister)
        elif kind == "http.response.body" and message.get("more_body") and self._registered:
            await self._writable.wait()

    def _can_register(self) -> bool:
        request = self._request
        return not (request.finished or getattr(request, "_disconnected", False) or request.channel is None)

    def _unregister(self, result: object) -> None:
        if self._registered:
            self._registered = False
            self._writable.set()
            if self._request.channel is not None:
                self._request.unregisterProducer()
        return None
