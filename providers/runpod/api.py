"""The one client of RunPod's GraphQL API: the SDK's own query texts and error types, sent
to this provider's `api_base_url` with this provider's key.

Why not `runpod.api.ctl_commands`: the SDK's `run_graphql_query` reads the endpoint from the
process environment (`os.environ["RUNPOD_API_BASE_URL"]`, looked up on every call), so two
providers (or a test's fake and a real account) in one process could not have different
endpoints without racing on a process-global; `stop_pod`/`terminate_pod` take no `api_key`
and read the global `runpod.api_key`, which Nebula never sets; and `create_pod` inlines env
values and `dockerArgs` into the mutation unescaped (a `"` in a Secret breaks the query).
So `RunPodApi.run` does what `run_graphql_query` does (same headers, `User-Agent`, bearer
key, `runpod.error.AuthenticationError` on 401, `runpod.error.QueryError` for an `errors`
body) with a per-provider URL, key, timeout and session; the query texts are the SDK's
(reached through `sdk`)
`QUERY_POD`, `generate_pod_query`, `generate_gpu_query`, `generate_pod_terminate_mutation`
and, for creation, the SDK's mutation shape with every string escaped (`deploy_mutation`).
Every failure leaves here as a `providers.errors` type (`classify.translate`); the key is
never logged, put in a message or a repr.
Tests: tests/providers/runpod/test_runpod_provider_errors.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests

from providers.runpod.classify import translate
from providers.runpod.sdk import (
    QUERY_POD,
    USER_AGENT,
    AuthenticationError,
    RunPodError,
    generate_pod_query,
    query_error,
)

POD_RESULT = "id desiredStatus imageName env machineId machine { podHostId }"
GPU_TYPES_QUERY = """
query GpuTypes {
  gpuTypes {
    id displayName memoryInGb maxGpuCount secureCloud communityCloud securePrice communityPrice
    lowestPrice(input: {gpuCount: 1}) { minimumBidPrice uninterruptablePrice }
  }
}
"""
__all__ = ["QUERY_POD", "RunPodApi", "deploy_mutation", "generate_pod_query", "literal"]


def literal(value: str) -> str:
    """A GraphQL string literal (JSON's escapes are GraphQL's)."""
    return json.dumps(value)


def deploy_mutation(kind: str, fields: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """`kind` (`podFindAndDeployOnDemand`, `podRentInterruptable`, `deployCpuPod`) with the
    input `fields` (str: quoted; bool, int, float as is; `Enum` markers via `Word`) and env."""
    parts = []
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, Word):
            text = value.text
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        else:
            text = literal(str(value))
        parts.append(f"{key}: {text}")
    items = ", ".join(f"{{ key: {literal(k)}, value: {literal(v)} }}" for k, v in env.items())
    parts.append(f"env: [{items}]")
    return f"mutation {{ {kind}(input: {{ {', '.join(parts)} }}) {{ {POD_RESULT} }} }}"


class Word:
    """An enum value written bare in a query (`cloudType: SECURE`)."""

    def __init__(self, text: str) -> None:
        self.text = text


class RunPodApi:
    """GraphQL over one `requests.Session`. `key` is called for the API key on each query
    (so a rotated Secret file is picked up); it raises `Unauthorized` when there is none."""

    def __init__(self, base_url: str, key: Callable[[], str], *, timeout: float) -> None:
        self._url = f"{base_url}/graphql"
        self._key = key
        self._timeout = timeout
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"RunPodApi({self._url})"

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def run(self, query: str, *, secrets: Sequence[str] = ()) -> dict[str, Any]:
        """The `data` of the answer to `query`; only `providers.errors` types escape.
        `secrets`: values (env) scrubbed from any message as well as the key."""
        key = self._key()
        try:
            return self._post(query, key)
        except (RunPodError, HttpStatus, requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise translate(exc, secrets=(key, *secrets)) from None

    def _post(self, query: str, key: str) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Authorization": f"Bearer {key}"}
        response = self._session().post(
            self._url, headers=headers, data=json.dumps({"query": query}), timeout=self._timeout
        )
        if response.status_code == 401:
            raise AuthenticationError("Unauthorized request, please check your API key.")
        if response.status_code == 403:
            raise AuthenticationError("Forbidden: the API key lacks the permission for this request.")
        if response.status_code == 429 or response.status_code >= 500:
            raise HttpStatus(response.status_code, response.headers.get("Retry-After"))
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("the answer is not a JSON object")
        if body.get("errors"):
            raise query_error(str(body["errors"][0].get("message", "")), query)
        data = body.get("data")
        if not isinstance(data, dict):
            raise ValueError("the answer carries no data")
        return data


class HttpStatus(Exception):
    """A throttled or failed HTTP answer (no GraphQL body to read)."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after
