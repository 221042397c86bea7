"""The kubelet listener's plain HTTP routes, as one ASGI callable per request.

Called by `app.KubeletApp` for `type: http`. containerLogs streams the provider's bytes
chunk by chunk (Twisted flushes each write), a polled stream from `follow`'s pool, any
other from a thread of its own, each under `StreamCaps.followers`; every provider call
runs off the reactor.
Errors before the response starts go through `problems.problem_from`, the one mapping.
Tests: tests/vnode/kubelet/test_listeners.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kube import observe
from providers import errors
from providers.base import LogStream, PolledLogStream
from vnode.kubelet import follow, logparams, routes
from vnode.kubelet.follow import until_end
from vnode.kubelet.loop import run_unless
from vnode.kubelet.problems import Problem, problem_from
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.streamcaps import StreamCaps
from vnode.stats import resourcemetrics, usage

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

LOG_READ_SIZE = follow.READ_SIZE
IGNORED_HEADER = b"x-nebula-log-options-ignored"
REFUSED_RETRY_AFTER = 5.0  # seconds a log stream refused at `followers_total` is told to wait


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = headers or [(b"content-type", b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_problem(send: Send, problem: Problem) -> None:
    await respond(send, problem.code, problem.body(), problem.headers())


async def respond_json(send: Send, data: Any) -> None:
    await respond(send, 200, json.dumps(data).encode(), [(b"content-type", b"application/json")])


async def serve_http(
    scope: Scope, receive: Receive, send: Send, registry: HandlerRegistry, streams: StreamCaps | None = None
) -> None:
    """One kubelet HTTP request (no upgrade). 404 for anything not a kubelet route (I5)."""
    try:
        route = routes.resolve(scope["method"], scope.get("raw_path", b"").decode("latin-1") or scope["path"])
    except routes.MethodNotAllowed as exc:
        await respond_problem(send, Problem(405, str(exc)))
        return
    if route is None:
        await respond(send, 404, b"404 request not found")
        return
    query = scope.get("query_string", b"").decode("latin-1")
    try:
        if route.kind is routes.Kind.LOGS:
            await serve_logs(route, query, receive, send, registry, streams)
        elif route.kind in routes.STREAMING:
            raise Problem(400, "unable to upgrade: missing upgrade headers in request (SPDY/3.1 or websocket)")
        elif route.kind is routes.Kind.PORT_FORWARD:
            refuse_plain_port_forward(route, registry)
        elif route.kind is routes.Kind.HEALTHZ:
            await respond(send, 200, b"ok")
        elif route.kind is routes.Kind.PODS:
            await respond_json(send, pod_list(registry))
        elif route.kind is routes.Kind.RUNNING_PODS:
            await respond_json(send, pod_list(registry, running_only=True))
        elif route.kind is routes.Kind.STATS:
            await respond_json(send, await asyncio.to_thread(stats_summary, registry))
        elif route.kind is routes.Kind.METRICS:
            text = await asyncio.to_thread(lambda: resourcemetrics.resource_text(node_usage(registry)))
            await respond(send, 200, text.encode(), [(b"content-type", resourcemetrics.CONTENT_TYPE.encode())])
    except Exception as exc:
        problem = problem_from(exc)
        if problem.code >= 500:
            logger.warning("kubelet %s %s: %s", scope["method"], scope["path"], problem.message, exc_info=exc)
        await respond_problem(send, problem)


def refuse_plain_port_forward(route: routes.Route, registry: HandlerRegistry) -> None:
    """portForward without an upgrade: 404 for a Pod not here, 400 naming the provider
    that cannot forward, else the kubelet's 400 (an upgrade is required)."""
    handler = registry.find(route.namespace, route.pod)
    try:
        handler.serving.forwarding_instance(route.namespace, route.pod)
    except errors.NotSupported as exc:
        raise Problem(400, str(exc)) from exc
    raise Problem(400, "Upgrade request required: port-forward needs SPDY/3.1 (portforward.k8s.io)")


def pod_list(registry: HandlerRegistry, *, running_only: bool = False) -> dict[str, Any]:
    pods = [pod for handler in registry.handlers() for pod in handler.get_pods()]
    if running_only:
        pods = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}


def node_usage(registry: HandlerRegistry) -> usage.NodeUsage:
    """Every node's Pods as one: the nodes share this listener's address (docs/kubelet-api.md#metrics)."""
    return usage.merged(h.serving.pod_usage() for h in registry.handlers())


def stats_summary(registry: HandlerRegistry) -> dict[str, Any]:
    return usage.summary(node_usage(registry), now=datetime.now(UTC))


async def serve_logs(
    route: routes.Route,
    query: str,
    receive: Receive,
    send: Send,
    registry: HandlerRegistry,
    streams: StreamCaps | None = None,
) -> None:
    """Validate, take a follower's place (I7: 429 past `followers_total`), open the
    provider's stream, then copy it out chunk by chunk until it ends or the client goes
    (which closes the stream). The place is given back once, however the answer ends."""
    try:
        options = logparams.parse_log_options(query, now=datetime.now(UTC))
    except logparams.InvalidParameter as exc:
        raise Problem(400, str(exc)) from exc
    handler = registry.target(route.namespace, route.pod, route.container, capability="logs")
    options, ignored = logparams.honoured_by(options, stamps_at_source=handler.capabilities().log_timestamps)
    gauge = streams.followers if streams is not None else None
    if gauge is not None and not gauge.take():
        raise Problem(429, gauge.refusal(), retry_after=REFUSED_RETRY_AFTER)
    try:
        stream = await asyncio.to_thread(
            handler.serving.get_container_logs, route.namespace, route.pod, route.container, options
        )
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if ignored:
            headers.append((IGNORED_HEADER, ", ".join(ignored).encode()))
        await _stream_logs(stream, headers, receive, send, name=f"logs-{route.namespace}-{route.pod}")
    finally:
        if gauge is not None:
            gauge.give()


async def _stream_logs(
    stream: LogStream, headers: list[tuple[bytes, bytes]], receive: Receive, send: Send, *, name: str
) -> None:
    """A `PolledLogStream` is followed by the pool (no thread of its own); any other by
    `read_in_thread`. Either way the stream is closed when this returns."""
    if isinstance(stream, PolledLogStream):
        follower = follow.follow(stream)  # owns the stream from here: closes it off the loop
        chunks, stop = follower.chunks(), follower.close
    else:
        chunks, stop = read_in_thread(stream, name=name), stream.close
    watcher: asyncio.Future[None] | None = None
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        watcher = asyncio.ensure_future(_close_on_disconnect(receive, stop))
        observe.current().stream_opened("logs")
        try:
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            observe.current().stream_closed("logs")
    finally:
        if watcher is not None:
            watcher.cancel()
        await chunks.aclose()
        stop()


async def _close_on_disconnect(receive: Receive, stop: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stop()


async def read_in_thread(stream: LogStream, *, name: str) -> AsyncGenerator[bytes, None]:
    """Yield what `stream.read` returns, read by a thread of its own: for a stream without
    `read_nowait` (ssh, modal, runpod), which may block for hours in `read`, so it must
    not hold a pool's worker. A bounded queue in between."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue(follow.QUEUED_CHUNKS)
    stop = threading.Event()

    def put(item: bytes | BaseException) -> bool:
        return run_unless(chunks.put(item), loop, stop, 1.0)

    def pump() -> None:
        try:
            while not stop.is_set():
                data = stream.read(LOG_READ_SIZE)
                if not put(data) or not data:
                    return
        except Exception as exc:
            put(exc)

    thread = threading.Thread(target=pump, name=name, daemon=True)
    thread.start()
    try:
        async for chunk in until_end(chunks.get):
            yield chunk
    finally:
        stop.set()
        stream.close()
