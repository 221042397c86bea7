"""Benchmark: kubelet API stream throughput, echo latency, and a hold test, on loopback.

Prints, in one run: raw TLS socket copy throughput (the physical limit here), containerLogs
throughput, SPDY exec stdout throughput and websocket exec stdout throughput (each also as
a ratio to raw), port-forward download throughput (as a ratio to raw), the echo round-trip
p50/p99 through an exec session, and the hold test (bench/streamhold.py): 1,000 `logs -f`
followers, 100 exec sessions and 200 port-forwards from one authenticated address for `--hold`
seconds, with the error count and the server's threads, RSS and fds before, held and after.
Throughput runs use the local provider (real processes); the hold uses the in-process fake
provider, whose scripted logs and echo port cost no processes. Every client runs in a child
process, as kubectl does, so the figures are the server's alone.
Usage: python bench/streams.py [--megabytes 200] [--hold 60] [--followers 1000] [--execs 100]
       [--forwards 200] [--hold-only]
"""

from __future__ import annotations

import argparse
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import websocket  # noqa: E402

from bench import portforward, streamhold  # noqa: E402
from providers.base import LogOptions, PodSpec, Provider, ProvisionRequest  # noqa: E402
from providers.claim import claim_name  # noqa: E402
from providers.local import LocalProvider, folder  # noqa: E402
from tests.support.clients.spdy import SpdyClient  # noqa: E402
from tests.support.rigs import offline  # noqa: E402
from tests.support.servers import echo as echoserver  # noqa: E402
from vnode.handler import Handler  # noqa: E402
from vnode.kubelet import certs  # noqa: E402
from vnode.kubelet.resolve import HandlerRegistry  # noqa: E402
from vnode.kubelet.server import ListenerConfig, Listeners  # noqa: E402
from vnode.kubelet.views import LOG_READ_SIZE  # noqa: E402

TLS = ssl._create_unverified_context()
MB = 1024 * 1024


def rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def adopt(handler: Handler, name: str, command: tuple[str, ...]) -> None:
    uid = str(uuid.uuid4())
    pod = {"metadata": {"namespace": "bench", "name": name, "uid": uid}, "spec": {"containers": [{"name": "main"}]}}
    spec = PodSpec("bench", name, uid, "main", "busybox", command=command)
    result = handler.provider.provision(spec, ProvisionRequest(claim=claim_name("bench", name, uid)))
    deadline = time.monotonic() + 60
    while (instance := handler.provider.get(result.instance_id)) is None or instance.state.value != "running":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.05)
    handler.adopt(pod, instance)


def offline_handler(provider: Provider) -> Handler:
    """A Handler with no API server: its writes and Events are kept in memory."""
    return offline.offline_handler(provider, events=offline.KeptEvents(), kube=offline.KeptPatches())


# -- throughput ------------------------------------------------------------------------------
def run_client(kind: str, port: int, target: str, total: int) -> float:
    """MB/s seen by a client in a process of its own, as kubectl is: sharing this process
    (and its GIL) with the server would measure the two together, not the server."""
    child = subprocess.run(
        [sys.executable, __file__, "--client", kind, str(port), target, str(total)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if child.returncode != 0:
        raise RuntimeError(f"the {kind} client failed: {child.stderr.strip()[-2000:]}")
    got, seconds = child.stdout.split()
    return int(got) / MB / float(seconds)


def client_main(kind: str, port: int, target: str, total: int) -> None:
    """Child process: move the bytes, print `bytes seconds`. Raw and logs are timed from
    the first byte asked for (after the TLS handshake); exec from the session's start."""
    if kind in ("raw", "logs"):
        with TLS.wrap_socket(socket.create_connection(("127.0.0.1", port))) as sock:
            started, got = time.perf_counter(), 0
            if kind == "logs":
                request = f"GET /containerLogs/bench/{target}/main HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                sock.sendall(request.encode())
            while data := sock.recv(1 << 20):
                got += len(data)
    elif kind == "pf":
        started = time.perf_counter()
        got = portforward.download(port, target, total)
    else:
        started = time.perf_counter()
        got = (spdy_stdout if kind == "spdy" else websocket_stdout)(port, target, total)
    print(got, time.perf_counter() - started)


def raw_tls(total: int) -> float:
    """MB/s of one TLS connection on loopback: a thread here writes 64 KiB chunks, a client
    process reads."""
    pair = certs.issue(certs.make_ca("bench"), "bench", hosts=("127.0.0.1",))
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "c.pem").write_bytes(pair.cert_pem + pair.key_pem)
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(Path(folder) / "c.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            chunk = b"x" * 65536
            for _ in range(total // len(chunk)):
                tls.sendall(chunk)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        return run_client("raw", port, "-", total)
    finally:
        thread.join()
        listener.close()


def provider_reader(provider: LocalProvider, handler: Handler, pod: str) -> float:
    """MB/s of the provider's own LogStream, no server: what containerLogs can at most reach."""
    entry = handler.tracked(f"bench/{pod}")
    assert entry is not None and entry.instance_id is not None
    stream = provider.logs(entry.instance_id, LogOptions())
    started, got = time.perf_counter(), 0
    while data := stream.read(LOG_READ_SIZE):  # as the server reads it
        got += len(data)
    stream.close()
    return got / MB / (time.perf_counter() - started)


def spdy_stdout(port: int, pod: str, total: int) -> int:
    path = f"/exec/bench/{pod}/main?command=head&command=-c&command={total}&command=/dev/zero&output=1&error=1"
    with SpdyClient.connect(("127.0.0.1", port), path, ssl_context=TLS, timeout=300) as client:
        result = client.communicate(client.open_exec())
    assert len(result.stdout) == total, len(result.stdout)
    return total


def websocket_stdout(port: int, pod: str, total: int) -> int:
    url = f"wss://127.0.0.1:{port}/exec/bench/{pod}/main?command=head&command=-c&command={total}&command=/dev/zero&output=1"
    conn = websocket.WebSocket(sslopt={"cert_reqs": ssl.CERT_NONE}, skip_utf8_validation=True)
    got = 0
    conn.connect(url, subprotocols=["v5.channel.k8s.io"], timeout=300)
    try:
        while True:
            opcode, data = conn.recv_data()
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            if data[:1] == b"\x01":
                got += len(data) - 1
    finally:
        conn.close()
        conn.shutdown()
    assert got == total, got
    return total


def echo_latency(port: int, pod: str, rounds: int = 300) -> tuple[float, float]:
    path = f"/exec/bench/{pod}/main?command=cat&input=1&output=1&error=1"
    samples = []
    with SpdyClient.connect(("127.0.0.1", port), path, ssl_context=TLS) as client:
        streams = client.open_exec(stdin=True)
        for i in range(rounds):
            expected = len(client.received(streams["stdout"])) + 2
            started = time.perf_counter()
            client.send(streams["stdin"], b"%c\n" % (65 + i % 26))
            client.wait_for(lambda n=expected: len(client.received(streams["stdout"])) >= n, "the echo")
            samples.append((time.perf_counter() - started) * 1000)
        client.communicate(streams)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def throughput(server: Listeners, local: LocalProvider, handler: Handler, state: Path, total: int) -> None:
    lines = total // 100
    adopt(handler, "logs", ("sh", "-c", f"yes 'x{'y' * 98}' | head -n {lines}; sleep 3600"))
    adopt(handler, "shell", ("sleep", "3600"))
    while sum(f.stat().st_size for f in (state / "local").glob(f"*/*/{folder.LOG_FILE}")) < lines * 100:
        time.sleep(0.2)
    raw = raw_tls(total)
    print(f"raw TLS socket copy:      {raw:8.1f} MB/s")
    alone = provider_reader(local, handler, "logs")
    print(f"local provider's log reader alone (the ceiling for containerLogs): {alone:8.1f} MB/s")
    logs = run_client("logs", server.kubelet_port, "logs", total)
    print(f"containerLogs:            {logs:8.1f} MB/s  ({logs / raw:.0%} of raw; target >= 50%)")
    spdy_mbs = run_client("spdy", server.kubelet_port, "shell", total)
    print(f"SPDY exec stdout:         {spdy_mbs:8.1f} MB/s  ({spdy_mbs / raw:.0%} of raw; target >= 30%)")
    ws_mbs = run_client("ws", server.kubelet_port, "shell", total)
    print(f"websocket exec stdout:    {ws_mbs:8.1f} MB/s  ({ws_mbs / raw:.0%} of raw; target >= 30%)")
    source_port = echoserver.free_port()
    adopt(handler, "source", (sys.executable, echoserver.__file__, str(source_port), "source"))
    wait_listening(source_port)
    pf_mbs = run_client("pf", server.kubelet_port, f"source:{source_port}", total)
    print(f"port-forward download:    {pf_mbs:8.1f} MB/s  ({pf_mbs / raw:.0%} of raw; target >= 40%)")
    p50, p99 = echo_latency(server.kubelet_port, "shell")
    print(f"echo round trip (SPDY):   p50 {p50:.2f} ms, p99 {p99:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200, help="bytes moved per throughput run")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds the hold test keeps its streams open")
    parser.add_argument("--followers", type=int, default=1000)
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--forwards", type=int, default=200, help="port-forwards held open (0: none)")
    parser.add_argument("--hold-only", action="store_true", help="skip the throughput runs")
    parser.add_argument("--load-client", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        kind, port, target, size = args.client
        client_main(kind, int(port), target, int(size))
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,300 streams: an fd each, both ends
    if args.load_client:
        port, pem, followers, execs, forwards, seconds = args.load_client
        errors = streamhold.load(int(port), pem, int(followers), int(execs), int(forwards), float(seconds))
        print(f"errors={errors}", flush=True)
        return
    total = args.megabytes * MB
    registry = HandlerRegistry()
    keys = tempfile.TemporaryDirectory()
    ca_path, pem = streamhold.client_ca(Path(keys.name))
    server = Listeners(registry, kubelet=ListenerConfig("127.0.0.1", 0), node_ip="127.0.0.1", client_ca=ca_path)
    import logging

    logging.disable(logging.WARNING)  # the open-port warning and Twisted's access log
    server.start()
    if not args.hold_only:
        throughput_run(server, total)
    streamhold.hold(server, registry, pem, adopt, offline_handler, args.followers, args.execs, args.forwards, args.hold)
    server.stop()
    keys.cleanup()


def throughput_run(server: Listeners, total: int) -> None:
    registry = server.registry
    with tempfile.TemporaryDirectory() as state:
        local = LocalProvider("local", {"state_dir": state, "grace_period": 1})
        handler = offline_handler(local)
        registry.add(handler)
        try:
            throughput(server, local, handler, Path(state), total)
        finally:  # the state folder goes with this block: the instances go first, even after an error
            registry.remove(handler)
            deadline = time.monotonic() + 30
            while (left := local.list()) and time.monotonic() < deadline:
                for instance in left:
                    local.terminate(instance.id)
                time.sleep(0.2)


if __name__ == "__main__":
    main()
