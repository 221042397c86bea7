"""A local instance serving the echo server (tests/support/servers/echo.py) on a free port, tracked
by an offline Handler on a kubelet listener's registry: the far end of the port-forward tests
(tests/vnode/kubelet/test_port_forward.py, test_port_forward_threads.py). Never asserts."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from providers.base import LogOptions, LogStreamer, ProvisionRequest
from providers.claim import claim_name
from providers.local import LocalProvider
from providers.podspec import pod_spec_from_dict
from tests.support.factories import make_pod
from tests.support.local_cleanup import kill_leftovers
from tests.support.polling import wait_for
from tests.support.rigs.offline import offline_handler
from tests.support.servers import echo as echoserver
from vnode.handler import Handler
from vnode.kubelet.resolve import HandlerRegistry


def logs(handler: Handler) -> bytes:
    """What the echo Pod's server has said so far (its log, read whole)."""
    provider = handler.provider
    assert isinstance(provider, LogStreamer)
    stream = provider.logs(handler.serving.kubelet_instance("default", "echo", "main", capability="logs"), LogOptions())
    try:
        out = b""
        while data := stream.read():
            out += data
        return out
    finally:
        stream.close()


@contextmanager
def echo_pod(provider: LocalProvider, folder: Path, registry: HandlerRegistry) -> Iterator[tuple[Handler, int]]:
    """The Pod `default/echo` on `provider` (state under `folder`), listening; (its Handler, port)."""
    handler = offline_handler(provider)
    port = echoserver.free_port()
    pod = make_pod(
        "echo", namespace="default", uid=str(uuid.uuid4()), command=(sys.executable, echoserver.__file__, str(port))
    )
    request = ProvisionRequest(claim=claim_name("default", "echo", pod["metadata"]["uid"]))
    result = provider.provision(pod_spec_from_dict(pod), request)
    handler.adopt(pod, wait_for(lambda: provider.get(result.instance_id), what="the echo instance"))
    wait_for(lambda: b"listening" in logs(handler), 30, what="the echo server to listen")
    registry.add(handler)
    try:
        yield handler, port
    finally:
        registry.remove(handler)
        for instance in provider.list():
            provider.terminate(instance.id)
        kill_leftovers(folder)
