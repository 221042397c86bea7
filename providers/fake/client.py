"""The HTTP client of the fake cloud service: one request per cloud call.

Used by `FakeProvider` when its options name a `url`, and by `manage.py fakecloud` for
the control verbs. Connection errors, 5xx and malformed answers become `Unavailable`;
typed error answers become the same `providers.errors` class they were on the server.
Tests: tests/providers/fake/test_fake_http.py.
"""

from __future__ import annotations

import builtins
import http.client
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from providers import base, errors
from providers.fake import wire
from providers.fake.interrupts import BATCH
from providers.fake.logs import LogChunk
from providers.fake.process import FinishedProcess

_T = TypeVar("_T")
MAX_ANSWER = 64 << 20  # bytes; a longer answer is treated as a broken service (I7)


class FakeCloudClient:
    """Talks to `manage.py fakecloud serve` at `url` (http://host:port). No I/O until a call."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"fake cloud url {url!r} must look like http://host:port")
        self.url = url.rstrip("/")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout

    # -- cloud calls: each names its owner in the `owner` query parameter ----------------
    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest, *, owner: str) -> base.ProvisionResult:
        body = {"pod": wire.pod_to_json(pod), "request": wire.request_to_json(request)}
        answer = self._call("POST", _path("/v1/provision", owner=owner), body)
        return self._decode(wire.result_from_json, answer)

    def terminate(self, instance_id: str, *, owner: str) -> None:
        self._call("POST", _path(f"/v1/instances/{_segment(instance_id)}/terminate", owner=owner), {})

    def get(self, instance_id: str, *, owner: str) -> base.Instance | None:
        answer = self._call("GET", _path(f"/v1/instances/{_segment(instance_id)}", owner=owner))
        if "instance" not in answer:
            raise errors.Unavailable(f"fake cloud at {self.url} gave a malformed answer")
        raw = answer["instance"]
        return None if raw is None else self._decode(wire.instance_from_json, raw)

    def list(self, *, owner: str) -> builtins.list[base.Instance]:
        answer = self._call("GET", _path("/v1/instances", owner=owner))
        return [self._decode(wire.instance_from_json, raw) for raw in self._items(answer, "instances")]

    def restart(self, instance_id: str, *, owner: str, container: str = "") -> None:
        path = _path(f"/v1/instances/{_segment(instance_id)}/restart", owner=owner, container=container)
        self._call("POST", path, {})

    def stop_container(self, instance_id: str, container: str, *, owner: str, grace: float = 0.0) -> None:
        path = _path(f"/v1/instances/{_segment(instance_id)}/stop", owner=owner, container=container, grace=grace)
        self._call("POST", path, {})

    def exec(self, instance_id: str, command: Sequence[str], *, owner: str, container: str = "") -> FinishedProcess:
        """A command without stdin or a terminal, run to its end on the service."""
        path = _path(f"/v1/instances/{_segment(instance_id)}/exec", owner=owner, container=container)
        return self._decode(wire.finished_from_json, self._call("POST", path, {"command": list(command)}))

    def notices(self, *, owner: str, wait: float, limit: int = BATCH) -> builtins.list[base.Notice]:
        """A long poll: the socket waits `wait` seconds beyond the call's own timeout."""
        path = _path("/v1/notices", owner=owner, wait=max(0.0, wait), limit=limit)
        answer = self._call("GET", path, timeout=self._timeout + max(0.0, wait))
        return [self._decode(wire.notice_from_json, raw) for raw in self._items(answer, "notices")]

    def ack(self, notice_id: str, *, owner: str) -> None:
        self._call("POST", _path(f"/v1/notices/{_segment(notice_id)}/ack", owner=owner), {})

    def offerings(self) -> builtins.list[base.Offering]:
        answer = self._call("GET", "/v1/offerings")
        return [self._decode(wire.offering_from_json, raw) for raw in self._items(answer, "offerings")]

    def log_chunk(
        self,
        instance_id: str,
        *,
        owner: str,
        after: int,
        limit: int,
        previous: bool = False,
        opening: bool = False,
        container: str = "",
    ) -> LogChunk:
        query = {"owner": owner, "after": after, "limit": limit, "previous": int(previous), "open": int(opening)}
        if container:
            query["container"] = container
        path = f"/v1/instances/{_segment(instance_id)}/logs?{urlencode(query)}"
        return self._decode(wire.chunk_from_json, self._call("GET", path))

    def scenario(self) -> dict[str, Any]:
        raw = self._call("GET", "/v1/scenario").get("scenario")
        if not isinstance(raw, dict):
            raise errors.Unavailable(f"fake cloud at {self.url} gave a malformed scenario")
        return raw

    # -- control --------------------------------------------------------------------
    def inject(self, fault: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/faults", dict(fault)).get("fault") or {})

    def faults(self) -> builtins.list[dict[str, Any]]:
        return self._items(self._call("GET", "/v1/faults"), "faults")

    def clear(self, fault_id: str | None = None) -> int:
        path = "/v1/faults" if fault_id is None else f"/v1/faults/{_segment(fault_id)}"
        return int(self._call("DELETE", path).get("removed", 0))

    def instances(self) -> builtins.list[dict[str, Any]]:
        """Every stored instance, raw, as the service keeps it (containers and their files)."""
        return self._items(self._call("GET", "/v1/records"), "instances")

    def calls(self, method: str | None = None) -> builtins.list[dict[str, Any]]:
        query = "" if method is None else "?" + urlencode({"method": method})
        return self._items(self._call("GET", f"/v1/calls{query}"), "calls")

    def call_counts(self) -> dict[str, int]:
        counts = self._call("GET", "/v1/call-counts").get("counts")
        if not isinstance(counts, dict):
            raise errors.Unavailable(f"fake cloud at {self.url} gave malformed call counts")
        return {str(k): int(v) for k, v in counts.items()}

    def reset(self) -> None:
        self._call("POST", "/v1/reset", {})

    # -- transport ------------------------------------------------------------------
    def _call(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """One request; the JSON object answered, or the providers.errors it stands for."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout or self._timeout)
        try:
            conn.request(method, self._prefix + path, body=payload, headers=headers)
            response = conn.getresponse()
            status = response.status
            raw = response.read(MAX_ANSWER + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise errors.Unavailable(f"fake cloud at {self.url} unreachable: {exc}") from exc
        finally:
            conn.close()
        if len(raw) > MAX_ANSWER:
            raise errors.Unavailable(f"fake cloud at {self.url} answered more than {MAX_ANSWER} bytes")
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = None
        if status >= 300:
            raise wire.error_from_json(status, data)
        if not isinstance(data, dict):
            raise errors.Unavailable(f"fake cloud at {self.url} answered HTTP {status} without a JSON object")
        return data

    def _items(self, answer: Mapping[str, Any], key: str) -> builtins.list[Any]:
        items = answer.get(key)
        if not isinstance(items, list):
            raise errors.Unavailable(f"fake cloud at {self.url} gave a malformed {key} list")
        return items

    def _decode(self, decode: Callable[[Any], _T], raw: Any) -> _T:
        try:
            return decode(raw)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise errors.Unavailable(f"fake cloud at {self.url} gave a malformed answer: {exc}") from exc


def _segment(value: str) -> str:
    return quote(value, safe="")


def _path(path: str, *, owner: str, **more: object) -> str:
    query = {"owner": owner, **{k: v for k, v in more.items() if v not in ("", None)}}
    return f"{path}?{urlencode(query)}"
