"""The fake cloud as a small HTTP service (`manage.py fakecloud serve`), so its state
outlives any manager process, and with a state file the service itself.

`start_server` serves on a thread (tests, the command); routes are listed in
docs/providers/fake.md. Provider routes carry the caller's `Owner.key` as the `owner`
query parameter; control routes act on any owner's instances. Standard library only;
bodies are JSON and bounded (I7). Never imports Django and never logs request bodies.
Tests: tests/providers/fake/test_fake_http.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from providers import errors
from providers.fake import wire
from providers.fake.cloud import FakeCloud
from providers.fake.interrupts import BATCH
from providers.fake.process import run_to_end
from providers.fake.scenario import load_scenario
from providers.fake.state import read_state, write_state

MAX_BODY = 1 << 20  # 1 MiB
logger = logging.getLogger(__name__)

Route = Callable[[FakeCloud, list[str], dict[str, str], dict[str, Any]], tuple[int, Any]]


class FakeCloudServer:
    """A running service: `url`, the `cloud` behind it (for tests), `close()`."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread, cloud: FakeCloud) -> None:
        self._httpd = httpd
        self._thread = thread
        self.cloud = cloud
        host, port = httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._closed = False

    def close(self) -> None:
        """Stop serving, close the socket and join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def start_server(
    host: str = "127.0.0.1",
    port: int = 0,
    scenario: str | Path | Mapping[str, Any] | None = None,
    state_path: str | Path | None = None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> FakeCloudServer:
    """Serve a fake cloud on `host:port` (0: any free port) from a thread.

    With `state_path`, the saved state is loaded first and every change is saved.
    Raises ValueError for a bad scenario or state file, OSError if it cannot listen."""
    save: Callable[[dict[str, Any]], None] | None = None
    if state_path is not None:
        path = state_path

        def save(snapshot: dict[str, Any]) -> None:
            write_state(path, snapshot)

    cloud = FakeCloud(load_scenario(scenario), clock=clock, sleep=sleep, on_change=save)
    if state_path is not None:
        saved = read_state(state_path)
        if saved is not None:
            cloud.restore(saved)
    httpd = ThreadingHTTPServer((host, port), _Handler)
    httpd.daemon_threads = True
    httpd.cloud = cloud  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fakecloud", daemon=True)
    thread.start()
    return FakeCloudServer(httpd, thread, cloud)


class _Handler(BaseHTTPRequestHandler):
    server_version = "fakecloud/1"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("fakecloud %s %s", self.address_string(), format % args)

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        segments = [unquote(s) for s in split.path.lstrip("/").split("/")]
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        route, params = _route(method, segments)
        if route is None:
            self._answer(404, {"error": {"type": "NoRoute", "message": f"no route {method} {split.path}"}})
            return
        body = self._body() if method == "POST" else {}
        if body is None:
            return
        cloud: FakeCloud = self.server.cloud  # type: ignore[attr-defined]
        try:
            status, answer = route(cloud, params, query, body)
        except errors.ProviderError as exc:
            status, answer = wire.error_to_json(exc)
        except (KeyError, ValueError, TypeError) as exc:
            status, answer = 400, {"error": {"type": "InvalidRequest", "message": f"bad request: {exc}"}}
        except Exception:
            logger.exception("fakecloud: %s %s failed", method, split.path)
            status, answer = 500, {"error": {"type": "Internal", "message": "internal error"}}
        self._answer(status, answer)

    def _body(self) -> dict[str, Any] | None:
        """The JSON object sent, or None after answering 400/413."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            status = 413 if length > MAX_BODY else 400
            self._answer(status, {"error": {"type": "InvalidRequest", "message": f"body must be 0..{MAX_BODY} bytes"}})
            return None
        raw = self.rfile.read(length) if length else b""
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            self._answer(400, {"error": {"type": "InvalidRequest", "message": f"malformed JSON: {exc}"}})
            return None
        if not isinstance(data, dict):
            self._answer(400, {"error": {"type": "InvalidRequest", "message": "the body must be a JSON object"}})
            return None
        return data

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503 and isinstance(body, dict):
            retry = (body.get("error") or {}).get("retry_after")
            if retry is not None:
                self.send_header("Retry-After", str(max(1, round(retry))))
        self.end_headers()
        self.wfile.write(data)


def _route(method: str, segments: list[str]) -> tuple[Route | None, list[str]]:
    """The handler for a path, and the path parameters (an instance or fault id)."""
    if segments == ["healthz"] and method == "GET":
        return _healthz, []
    if len(segments) < 2 or segments[0] != "v1":
        return None, []
    key = (method, segments[1], *(["*"] if len(segments) > 2 else []), *segments[3:])
    route = _ROUTES.get(key)
    return route, segments[2:3]


def _owner(query: dict[str, str]) -> str:
    """The caller's `Owner.key`; "" when the query names none, which the cloud refuses."""
    return query.get("owner", "")


def _healthz(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"ok": True}


def _provision(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    pod, request = wire.pod_from_json(body["pod"]), wire.request_from_json(body["request"])
    return 200, wire.result_to_json(cloud.provision(pod, request, owner=_owner(query)))


def _list(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"instances": [wire.instance_to_json(i) for i in cloud.list(owner=_owner(query))]}


def _get(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    # Gone is a 200 with null: a 404 could come from any proxy, and unknown is not absent (I3).
    instance = cloud.get(params[0], owner=_owner(query))
    return 200, {"instance": None if instance is None else wire.instance_to_json(instance)}


def _terminate(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    cloud.terminate(params[0], owner=_owner(query))
    return 200, {}


def _restart(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    cloud.restart(params[0], owner=_owner(query), container=query.get("container", ""))
    return 200, {}


def _stop(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    container, grace = query.get("container", ""), float(query.get("grace", 0))  # "" (the first app one) is omitted
    cloud.stop_container(params[0], container, owner=_owner(query), grace=grace)
    return 200, {}


def _exec(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    command = [str(word) for word in body["command"]]
    process = cloud.exec(
        params[0], command, owner=_owner(query), tty=False, stdin=False, container=query.get("container", "")
    )
    return 200, wire.finished_to_json(run_to_end(process))


def _logs(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    chunk = cloud.log_chunk(
        params[0],
        owner=_owner(query),
        after=int(query.get("after", 0)),
        limit=int(query.get("limit", 1000)),
        previous=query.get("previous") == "1",
        opening=query.get("open") == "1",
        container=query.get("container", ""),
    )
    return 200, wire.chunk_to_json(chunk)


def _notices(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    # The cloud bounds `wait` (MAX_WAIT) and `limit` (BATCH); an empty list after the wait.
    found = cloud.notices(owner=_owner(query), wait=float(query.get("wait", 0)), limit=int(query.get("limit", BATCH)))
    return 200, {"notices": [wire.notice_to_json(n) for n in found]}


def _ack(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    cloud.ack(params[0], owner=_owner(query))
    return 200, {}


def _offerings(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"offerings": [wire.offering_to_json(o) for o in cloud.offerings()]}


def _scenario(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"scenario": cloud.scenario.raw}


def _faults(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"faults": [f.to_dict() for f in cloud.faults()]}


def _inject(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"fault": cloud.inject(body)}


def _clear(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"removed": cloud.clear(params[0] if params else None)}


def _records(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"instances": cloud.instances()}


def _calls(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"calls": [c.to_dict() for c in cloud.call_log(query.get("method"))]}


def _call_counts(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    return 200, {"counts": cloud.call_counts()}


def _reset(cloud: FakeCloud, params: list[str], query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    cloud.reset()
    return 200, {}


_ROUTES: dict[tuple[str, ...], Route] = {
    ("POST", "provision"): _provision,
    ("GET", "instances"): _list,
    ("GET", "instances", "*"): _get,
    ("POST", "instances", "*", "terminate"): _terminate,
    ("POST", "instances", "*", "restart"): _restart,
    ("POST", "instances", "*", "stop"): _stop,
    ("POST", "instances", "*", "exec"): _exec,
    ("GET", "instances", "*", "logs"): _logs,
    ("GET", "notices"): _notices,
    ("POST", "notices", "*", "ack"): _ack,
    ("GET", "offerings"): _offerings,
    ("GET", "scenario"): _scenario,
    ("GET", "faults"): _faults,
    ("POST", "faults"): _inject,
    ("DELETE", "faults"): _clear,
    ("DELETE", "faults", "*"): _clear,
    ("GET", "records"): _records,
    ("GET", "calls"): _calls,
    ("GET", "call-counts"): _call_counts,
    ("POST", "reset"): _reset,
}
