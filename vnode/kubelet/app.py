"""The kubelet listener's ASGI application: plain HTTP routes and websocket exec/attach.

Built once per `Listeners`; SPDY upgrades never reach it (the request hook takes
them). Lifespan events are acknowledged and otherwise ignored: the server owns start-up.
Tests: tests/vnode/kubelet/test_listeners.py.
"""

from __future__ import annotations

from typing import Any

from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.streamcaps import StreamCaps
from vnode.kubelet.views import Receive, Scope, Send, serve_http
from vnode.kubelet.wsexec import ExecConsumer


class KubeletApp:
    def __init__(self, registry: HandlerRegistry, streams: StreamCaps | None = None) -> None:
        self.registry = registry
        self.streams = streams or StreamCaps.from_limits(Limits())  # I7: process-wide stream caps
        self._websocket: Any = ExecConsumer.as_asgi(registry=registry, streams=self.streams)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await serve_http(scope, receive, send, self.registry, self.streams)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})


async def refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
    """The console serves no websocket. `KubeletRequest` answers such an upgrade 404 before
    Daphne sees it (I5); this refusal (403) is the fallback should one get through."""
    await receive()
    await send({"type": "websocket.close"})
