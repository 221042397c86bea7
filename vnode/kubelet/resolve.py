"""Which Handler serves a Pod: the registry of the process's Handlers and the lookup.

Filled by whoever starts the listener (runvnode, tests); read by every kubelet route.
A lookup asks each Handler whether it tracks the Pod; at most one can, since a Pod is
bound to one node. Checks that need no provider call are made here, before any upgrade,
so a missing Pod, instance or capability is still a 404 with a reason.
Tests: tests/vnode/kubelet/test_listeners.py, tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from providers import errors
from providers.base import PortConnection, Process
from vnode.handler import Handler
from vnode.kubelet import routes
from vnode.kubelet.execparams import StreamRequest, parse_stream_request
from vnode.kubelet.problems import Problem
from vnode.kubelet.routes import Kind, Route


class HandlerRegistry:
    """Thread-safe; Handlers may come and go while the listener serves."""

    def __init__(self, handlers: Iterable[Handler] = ()) -> None:
        self._handlers: list[Handler] = list(handlers)
        self._lock = threading.Lock()

    def add(self, handler: Handler) -> None:
        with self._lock:
            if handler not in self._handlers:
                self._handlers.append(handler)

    def add_all(self, handlers: Iterable[Handler]) -> None:
        for handler in handlers:
            self.add(handler)

    def remove(self, handler: Handler) -> None:
        with self._lock:
            if handler in self._handlers:
                self._handlers.remove(handler)

    def handlers(self) -> list[Handler]:
        with self._lock:
            return list(self._handlers)

    def find(self, namespace: str, pod: str) -> Handler:
        """The Handler tracking the Pod; 404 if none does."""
        for handler in self.handlers():
            if handler.tracks(namespace, pod):
                return handler
        raise Problem(404, f'pod "{namespace}/{pod}" is not on a node served here')

    def target(self, namespace: str, pod: str, container: str, *, capability: str) -> Handler:
        """The Handler for a streaming request, once the cheap checks pass (404 otherwise):
        the Pod is tracked, has an instance, names the container, and the provider has the
        capability (`logs`, `exec` or `attach`)."""
        handler = self.find(namespace, pod)
        try:
            handler.serving.kubelet_instance(namespace, pod, container, capability=capability)
        except (errors.NotFound, errors.NotSupported) as exc:
            raise Problem(404, str(exc)) from exc
        return handler

    def starter(self, route: Route, request: StreamRequest) -> Callable[[], Process]:
        """`process_starter` for an exec or attach route, once `target`'s checks pass."""
        handler = self.target(route.namespace, route.pod, route.container, capability=route.kind.value)
        return process_starter(handler, route, request)

    def dialer(self, namespace: str, pod: str) -> Callable[[int], PortConnection]:
        """What a port-forward session dials each port with: 404 now if the Pod is not
        here or has no instance; a provider without `PortForwarder` gets a dialer that
        fails every connection with the reason, which goes on its error stream."""
        handler = self.find(namespace, pod)
        try:
            handler.serving.forwarding_instance(namespace, pod)
        except errors.NotFound as exc:
            raise Problem(404, str(exc)) from exc
        except errors.NotSupported:
            pass  # the upgrade goes ahead; every connection's error stream says why

        def dial(port: int) -> PortConnection:
            return handler.serving.port_forward(namespace, pod, port)

        return dial


def forward_route(method: str, path: str) -> Route | None:
    """The portForward route of a request, or None if it is not one."""
    route = routes.resolve(method, path)
    return route if route is not None and route.kind is Kind.PORT_FORWARD else None


def stream_route(method: str, path: str, query: str) -> tuple[Route, StreamRequest]:
    """The exec or attach route of a request and its parsed query: 404 for any other
    path, 400 for a bad query (both transports, before anything is upgraded)."""
    route = routes.resolve(method, path)
    if route is None or route.kind not in routes.STREAMING:
        raise Problem(404, "404 request not found")
    return route, parse_stream_request(query, attach=route.kind is Kind.ATTACH)


def process_starter(handler: Handler, route: Route, request: StreamRequest) -> Callable[[], Process]:
    """The blocking call that starts the session's command (exec) or attachment (attach);
    the remote session runs it on its own thread."""

    def start() -> Process:
        if route.kind is Kind.ATTACH:
            return handler.serving.attach_to_container(
                route.namespace, route.pod, route.container, tty=request.tty, stdin=request.stdin
            )
        return handler.serving.run_in_container(
            route.namespace, route.pod, route.container, request.command, tty=request.tty, stdin=request.stdin
        )

    return start
