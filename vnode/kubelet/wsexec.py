"""exec and attach over websocket: a Channels consumer speaking the channel.k8s.io family.

Routed by `app.KubeletApp` for websocket upgrades on the kubelet listener. Subprotocols:
v5 (binary, with the CLOSE signal `ff <channel>`), v4 and channel.k8s.io (binary), and
their base64 text variants. Anything we cannot serve is refused before the handshake
completes (403), so kubectl falls back to SPDY, where it gets a proper error; so is a session
past the process-wide cap (`StreamCaps.sessions`, taken at connect, given back once the
session's threads are done or the client went before it started).
Tests: tests/vnode/kubelet/test_kubectl_e2e.py.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.utils import await_many_dispatch

from providers.base import Process
from vnode.kubelet import execparams, loop, resolve, routes
from vnode.kubelet.problems import Problem
from vnode.kubelet.remote import RemoteSession, once
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.streamcaps import StreamCaps

logger = logging.getLogger(__name__)

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_CHANNELS = {"stdout": STDOUT, "stderr": STDERR}


class ExecConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """One websocket exec or attach. Built per connection by `as_asgi(registry=...)`."""

    def __init__(self, *, registry: HandlerRegistry, streams: StreamCaps | None = None) -> None:
        super().__init__()
        self._registry = registry
        self._streams = streams  # I7: the process-wide stream caps (None: uncapped, for unit tests)
        self._protocol = ""
        self._session: RemoteSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gone = threading.Event()
        self._give_back: Callable[[], None] | None = None  # once the session cap's place is taken

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Channels' own, minus the channel layer: this consumer joins no group, and so
        needs no Django settings (the kubelet listener runs without them in benches)."""
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        try:
            await await_many_dispatch([receive], self.dispatch)
        except StopConsumer:
            pass

    # Channels' dispatch closes stale Django database connections through a worker thread
    # on every message; this consumer uses no database, and stdin must not queue behind it.
    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        await self.disconnect(message.get("code", 1000))
        raise StopConsumer()

    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            start, request, attach, name = self._prepare()
        except Problem as exc:
            logger.info("websocket exec refused (%d): %s", exc.code, exc.message)
            await self.close()  # before accept: Daphne answers 403
            return
        chosen = execparams.negotiate_websocket(self.scope.get("subprotocols") or [])
        if chosen is None:
            await self.close()
            return
        if self._streams is not None:
            places = self._streams.sessions
            if not places.take():
                logger.info("websocket exec refused (403): %s", places.refusal())
                await self.close()  # before accept: 403, and kubectl's SPDY fallback is told why
                return
            self._give_back = once(places.give)
        try:
            self._protocol = chosen
            await self.accept(subprotocol=chosen or None)
            first = STDOUT if request.stdout else STDERR if request.stderr else ERROR
            await self._send_frame(first, b"")  # "ready": what the kubelet sends first
            json_status = execparams.json_status(chosen)
            self._session = RemoteSession(
                start, request, self, json_status=json_status, attach=attach, name=name, on_end=self._give_back
            )
        except BaseException:
            self._ended()
            raise
        self._session.start()

    def _ended(self) -> None:
        if self._give_back is not None:
            self._give_back()

    def _prepare(self) -> tuple[Callable[[], Process], execparams.StreamRequest, bool, str]:
        query = self.scope.get("query_string", b"").decode("latin-1")
        route, request = resolve.stream_route(self.scope.get("method", "GET"), self.scope["path"], query)
        start = self._registry.starter(route, request)
        return start, request, route.kind is routes.Kind.ATTACH, f"ws-{route.kind.value}-{route.namespace}-{route.pod}"

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self._session is None:
            return
        try:
            channel, payload = self._decode(text_data, bytes_data)
        except (ValueError, binascii.Error):
            return  # not a frame of this protocol: ignored, as the kubelet ignores it
        if channel == STDIN:
            self._session.stdin(payload)
        elif channel == RESIZE:
            self._session.resize(payload)
        elif channel == CLOSE and self._protocol.startswith("v5.") and payload[:1] == bytes([STDIN]):
            self._session.stdin_eof()

    def _decode(self, text_data: str | None, bytes_data: bytes | None) -> tuple[int, bytes]:
        if "base64" in self._protocol and text_data is not None:
            if not text_data:
                raise ValueError("empty message")
            return ord(text_data[0]) - ord("0"), base64.b64decode(text_data[1:], validate=True)
        data = bytes_data if bytes_data is not None else (text_data or "").encode("utf-8")
        if not data:
            raise ValueError("empty message")
        return data[0], data[1:]

    async def disconnect(self, code: int) -> None:
        self._gone.set()
        if self._session is not None:
            self._session.abort()  # gives the place back once its threads are done
        else:
            self._ended()

    async def _send_frame(self, channel: int, payload: bytes) -> None:
        if "base64" in self._protocol:
            await self.send(text_data=chr(ord("0") + channel) + base64.b64encode(payload).decode("ascii"))
        else:
            await self.send(bytes_data=bytes([channel]) + payload)

    async def _finish(self, status: bytes) -> None:
        if status:
            await self._send_frame(ERROR, status)
        await self.close(code=1000)

    # -- Outlet (called from session threads) ---------------------------------------------
    def _run(self, make: Callable[[], Awaitable[None]]) -> None:
        if self._gone.is_set() or self._loop is None:
            return

        async def call() -> None:
            await make()

        loop.run_unless(call(), self._loop, self._gone, 0.5)

    def write(self, stream: str, data: bytes) -> None:
        self._run(lambda: self._send_frame(_CHANNELS[stream], data))

    def close_stream(self, stream: str) -> None:
        """Nothing to send: client-go ignores per-channel closes from the server; the final
        Close frame ends every channel."""

    def finish(self, status: bytes) -> None:
        self._run(lambda: self._finish(status))

    def pause_input(self, paused: bool) -> None:
        """Channels gives a consumer no way to stop reading; stdin queues in the session."""
