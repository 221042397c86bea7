"""The parts of the `runpod` SDK this provider uses: its query texts, its user agent and its
error types, imported by name.

Why by name: the SDK ships no type information, and mypy run on a file under `tests/providers/`
would resolve `runpod` to the test folder `tests/providers/runpod`; here it is one typed seam.
Called by `api` and `classify`.
Tests: tests/providers/runpod/test_runpod_provider_errors.py.
"""

from __future__ import annotations

import importlib
from typing import Any

_error: Any = importlib.import_module("runpod.error")
_pods: Any = importlib.import_module("runpod.api.queries.pods")
_gpus: Any = importlib.import_module("runpod.api.queries.gpus")
_mutations: Any = importlib.import_module("runpod.api.mutations.pods")

RunPodError: type[Exception] = _error.RunPodError
AuthenticationError: type[Exception] = _error.AuthenticationError
QueryError: type[Exception] = _error.QueryError
QUERY_POD: str = _pods.QUERY_POD
USER_AGENT: str = importlib.import_module("runpod.user_agent").USER_AGENT


def generate_pod_query(pod_id: str) -> str:
    return str(_pods.generate_pod_query(pod_id))


def generate_gpu_query(gpu_id: str, gpu_count: int) -> str:
    return str(_gpus.generate_gpu_query(gpu_id, gpu_count))


def generate_pod_terminate_mutation(pod_id: str) -> str:
    return str(_mutations.generate_pod_terminate_mutation(pod_id))


def query_error(message: str, query: str = "") -> Exception:
    return QueryError(message, query)
