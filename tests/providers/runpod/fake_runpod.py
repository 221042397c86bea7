"""A fake RunPod GraphQL API on 127.0.0.1 for the runpod SDK, whose pods are real processes
reachable over SSH (tests/providers/runpod/runpod_pods.py).

The SDK posts `{"query": ...}` to `$RUNPOD_API_BASE_URL/graphql` with `Authorization: Bearer
<key>` (RunPod also takes `?api_key=<key>`, so does the fake): point it here with
`RUNPOD_API_BASE_URL=fake.url` (read at every call) and `runpod.api_key = fake.api_key`. A
wrong key is HTTP 401 (the SDK's AuthenticationError); an error in `errors` is the SDK's
QueryError with RunPod's message. The operations and shapes: tests/providers/runpod/fake_runpod_api.py.

A pod's main process exiting is, as on RunPod, a container restart: the pod stays RUNNING, its
runtime is null until the container runs again (after 1 s, then 2, 4 ... up to 8 s), and every
exit code is kept (`exit_codes`). Controls: `refuse_capacity`, `queue`, `outage`, `interrupt`,
`kill`, `restart_on_exit`; `pods()` is a snapshot without env values.

Tests: tests/providers/runpod/test_fake_runpod.py
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.providers.runpod.fake_runpod_api import (
    CATALOG,
    NO_INSTANCES,
    NO_SPOT_INSTANCES,
    SCHEMA,
    GpuType,
    PodRecord,
    new_id,
    resolvers,
)  # fmt: skip
from tests.providers.runpod.fake_runpod_gql import GqlError, parse, project, validate
from tests.providers.runpod.runpod_pods import PodBox, free_port

_OUTAGE_PAGE = (
    b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"
)
_TICK = 0.05


@dataclass(frozen=True)
class PodView:
    """What a test may assert about a pod (env keys only: values are secrets)."""

    id: str
    name: str
    image: str
    env_keys: tuple[str, ...]
    gpu_type: str | None
    gpu_count: int
    cloud_type: str
    data_center: str
    interruptible: bool
    bid: float | None
    state: str  # desiredStatus, or "QUEUED" while deployed without a runtime
    docker_args: str
    address: str
    ssh_port: int
    running: bool


class FakeRunPod:
    """The account's API server and its pods; see the module doc."""

    def __init__(self, api_key: str, folder: Path, catalog: tuple[GpuType, ...] = CATALOG) -> None:
        self.api_key, self.folder, self.catalog = api_key, folder, catalog
        self.records: dict[str, PodRecord] = {}
        self.lock = threading.RLock()
        self._refusals: list[list[Any]] = []  # [gpu type or None, times left or None]
        self._queued = False
        self._outage: str | None = None
        self._restart = True
        self.remove_folder = False  # close() removes the folder (start_fake_runpod's own temporary one)
        self._backoff: dict[str, tuple[float, float]] = {}  # pod id -> (restart at, delay)
        self._net = random.randint(16, 250)
        self._count = 0
        self._roots = resolvers(self)
        self._server = self._serve(0)
        self.port = self._server.server_address[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-runpod", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- controls ----
    def refuse_capacity(self, gpu_type: str | None = None, times: int | None = 1) -> None:
        """The next `times` deploys (of `gpu_type`, or any) get the no-instances error; times=None:
        every one until refuse_capacity(times=0), which clears every refusal."""
        with self.lock:
            if times == 0:
                self._refusals.clear()
            else:
                self._refusals.append([gpu_type, times])

    def queue(self, on: bool) -> None:
        """While on, deployed pods stay without a runtime (nothing runs); off releases them."""
        with self.lock:
            self._queued = on
            if not on:
                for pod in self.records.values():
                    if pod.queued:
                        pod.queued = False
                        if pod.status == "RUNNING":
                            pod.box.start()

    def outage(self, on: bool | str) -> None:
        """True or "502": every request is a 502 with an HTML page; "503" likewise; "refused": the
        port is closed (connection refused). False ends it."""
        mode = "502" if on is True else (on or None)
        with self.lock:
            if mode == "refused" and self._outage != "refused":
                self._server.shutdown()
                self._server.server_close()
            elif self._outage == "refused" and mode != "refused":
                self._server = self._serve(self.port)
            self._outage = mode

    def restart_on_exit(self, on: bool) -> None:
        with self.lock:
            self._restart = on

    def interrupt(self, pod_id: str) -> None:
        """A spot interruption: the pod's processes are killed and it is EXITED (runtime null)."""
        with self.lock:
            pod = self.records[pod_id]
            assert pod.interruptible, "only an interruptible pod is interrupted"
            self.stop_pod(pod, "EXITED", code=137)

    def kill(self, pod_id: str, code: int = 137) -> None:
        """The container dies (as by the OOM killer, say) with `code`; it restarts as any exit does."""
        with self.lock:
            pod = self.records[pod_id]
            pod.box.halt(code)
            self._backoff[pod_id] = (time.monotonic() + 1.0, 1.0)

    def exit_codes(self, pod_id: str) -> list[int]:
        with self.lock:
            return list(self.records[pod_id].box.exit_codes)

    def box(self, pod_id: str) -> PodBox:
        """The pod's container (its folder, files, address, host key)."""
        with self.lock:
            return self.records[pod_id].box

    def pods(self) -> list[PodView]:
        with self.lock:
            return [self._view(pod) for pod in self.records.values()]

    def _view(self, pod: PodRecord) -> PodView:
        request = pod.request
        return PodView(
            pod.id, str(request.get("name")), str(request.get("imageName")), tuple(pod.env),
            pod.gpu.id if pod.gpu else None, pod.gpu_count, pod.cloud_type, pod.data_center, pod.interruptible, pod.bid,
            "QUEUED" if pod.queued and pod.status == "RUNNING" else pod.status, str(request.get("dockerArgs") or ""),
            pod.box.address, pod.box.ssh_port, pod.box.running,
        )  # fmt: skip

    # ---- what the resolvers call (lock held) ----
    def deploy(self, request: dict[str, Any], *, spot: bool, cpu: bool = False) -> PodRecord:
        gpu_id = request.get("gpuTypeId")
        gpu = None if cpu else next((gpu for gpu in self.catalog if gpu.id == gpu_id), None)
        refused = NO_SPOT_INSTANCES if spot else NO_INSTANCES
        if not cpu and gpu is None:
            raise GqlError(refused)
        if not request.get("imageName") and not request.get("templateId"):
            raise GqlError("Image name is required.")
        bid = None
        if spot:
            if not isinstance(request.get("bidPerGpu"), int | float):
                raise GqlError(
                    'Field "PodRentInterruptableInput.bidPerGpu" of required type "Float!" was not provided.'
                )
            bid = float(request["bidPerGpu"])
            if gpu is not None and bid < gpu.spot_price:
                raise GqlError(refused)
        for refusal in self._refusals:
            if refusal[0] in (None, gpu_id) and refusal[1] != 0:
                refusal[1] = None if refusal[1] is None else refusal[1] - 1
                raise GqlError(refused)
        cloud = str(request.get("cloudType") or "ALL")
        number, self._count = self._count, self._count + 1
        pod_id = new_id()
        address = f"127.{self._net}.{number // 250}.{number % 250 + 2}"
        folder = self.folder / pod_id
        folder.mkdir(parents=True)
        box = PodBox(pod_id, folder, address, free_port(address), {}, str(request.get("dockerArgs") or ""))
        pod = PodRecord(
            pod_id, request, gpu, "SECURE" if cloud == "ALL" else cloud, str(request.get("dataCenterId") or "EU-RO-1"),
            spot, bid, box, queued=self._queued,
        )  # fmt: skip
        box.env = pod.env
        self.records[pod_id] = pod
        if not pod.queued:
            box.start()
        return pod

    def stop_pod(self, pod: PodRecord, status: str, code: int | None = None) -> None:
        pod.status, pod.last_status_change = status, f"Exited by {'RunPod' if code else 'User'}: {time.ctime()}"
        self._backoff.pop(pod.id, None)
        pod.box.halt(code)

    def resume_pod(self, pod: PodRecord) -> None:
        if pod.status != "RUNNING":
            pod.status, pod.last_status_change = "RUNNING", f"Rented by User: {time.ctime()}"
            if not pod.queued:
                pod.box.start()

    def terminate(self, pod: PodRecord) -> None:
        self.stop_pod(pod, "TERMINATED")
        del self.records[pod.id]

    # ---- serving ----
    def answer(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            query = json.loads(body)["query"]
        except (ValueError, KeyError, TypeError):
            return 400, {
                "errors": [{"message": "POST body missing, invalid Content-Type, or JSON object has no keys."}]
            }
        try:
            operation = parse(str(query))
            validate(operation.fields, "Query" if operation.kind == "query" else "Mutation", SCHEMA)
        except GqlError as exc:
            return exc.status, {"errors": [{"message": exc.message, "extensions": {"code": exc.code}}]}
        roots = self._roots[operation.kind]
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        with self.lock:
            for selected in operation.fields:
                try:
                    data[selected.name] = project(roots[selected.name](selected.args), selected, selected.name)
                except GqlError as exc:
                    if exc.status != 200:
                        return exc.status, {"errors": [{"message": exc.message, "extensions": {"code": exc.code}}]}
                    data[selected.name] = None
                    errors.append({"message": exc.message, "path": [selected.name], "extensions": {"code": exc.code}})
        return 200, ({"errors": errors, "data": data} if errors else {"data": data})

    def _serve(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-runpod-http", daemon=True).start()
        return server

    def _run(self) -> None:
        while not self._stop.wait(_TICK):
            with self.lock:
                for pod in self.records.values():
                    self._tend(pod)

    def _tend(self, pod: PodRecord) -> None:
        if pod.status != "RUNNING" or pod.queued:
            return
        if pod.box.exited() is not None:
            self._backoff[pod.id] = (time.monotonic() + 1.0, 1.0)
        if pod.box.process is None and self._restart and pod.id in self._backoff:
            at, delay = self._backoff[pod.id]
            if time.monotonic() >= at:
                pod.box.start()
                self._backoff[pod.id] = (0.0, min(delay * 2, 8.0))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        with self.lock:
            if self._outage != "refused":
                self._server.shutdown()
                self._server.server_close()
            self._outage = "refused"
            for pod in self.records.values():
                pod.box.halt()
        if self.remove_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> FakeRunPod:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def _handler(fake: FakeRunPod) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            outage = fake._outage
            if outage in ("502", "503"):
                self._send(int(outage), _OUTAGE_PAGE, "text/html")
            elif self.path.split("?")[0] != "/graphql":
                self._send(404, b"Not Found", "text/plain")
            elif fake.api_key not in (_bearer(self.headers.get("Authorization")), _query_key(self.path)):
                self._send(401, json.dumps({"error": "Unauthorized"}).encode(), "application/json")
            else:
                status, answer = fake.answer(body)
                self._send(status, json.dumps(answer).encode(), "application/json")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _bearer(header: str | None) -> str | None:
    return header[7:] if header and header.startswith("Bearer ") else None


def _query_key(path: str) -> str | None:
    keys = parse_qs(urlsplit(path).query).get("api_key")
    return keys[0] if keys else None


def start_fake_runpod(*, api_key: str | None = None, folder: Path | None = None) -> FakeRunPod:
    """A started fake RunPod (close it, or use it as a context manager); pods live in `folder`
    (a new temporary folder, removed by close(), when not given)."""
    key = api_key or f"rpa_{secrets.token_hex(16)}"
    fake = FakeRunPod(key, folder or Path(tempfile.mkdtemp(prefix="fake-runpod-")))
    fake.remove_folder = folder is None
    return fake
