"""I7 at the kubelet listener, over real TLS: an overlong path, query or exec command is
refused with a status before any provider is asked (the SPDY frame, header-block and
stream bounds are tests/vnode/kubelet/test_spdy_session.py's)."""

from __future__ import annotations

from tests.support.rigs.offline import adopt_new_pod
from tests.support.servers.tls import https_get, kubelet_connection
from vnode.handler import Handler
from vnode.kubelet.execparams import MAX_COMMAND_ARGS
from vnode.kubelet.logparams import MAX_QUERY
from vnode.kubelet.routes import MAX_PATH
from vnode.kubelet.server import Listeners


def test_I7_a_path_longer_than_the_bound_is_404(server: Listeners, fake_handler: Handler) -> None:
    adopt_new_pod(fake_handler, "bounded-path")
    assert https_get(server.kubelet_port, "/containerLogs/default/bounded-path/main?tailLines=1")[0] == 200
    padded = "/containerLogs/default/bounded-path/main" + "/" * (MAX_PATH + 1)
    assert https_get(server.kubelet_port, padded)[0] == 404


def test_I7_a_log_query_longer_than_the_bound_is_400(server: Listeners, fake_handler: Handler) -> None:
    adopt_new_pod(fake_handler, "bounded-query")
    query = "tailLines=1&pad=" + "x" * MAX_QUERY
    status, _, body = https_get(server.kubelet_port, f"/containerLogs/default/bounded-query/main?{query}")
    assert status == 400 and f"longer than {MAX_QUERY}".encode() in body


def test_I7_an_exec_upgrade_with_more_command_words_than_the_bound_is_400(
    server: Listeners, fake_handler: Handler
) -> None:
    adopt_new_pod(fake_handler, "bounded-exec")
    query = "output=1&" + "&".join(["command=x"] * (MAX_COMMAND_ARGS + 1))
    connection = kubelet_connection(server.kubelet_port)
    try:
        upgrade = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}
        connection.request("POST", f"/exec/default/bounded-exec/main?{query}", headers=upgrade)
        response = connection.getresponse()
        status, body = response.status, response.read()
    finally:
        connection.close()
    assert status == 400 and b"command too long" in body, body
