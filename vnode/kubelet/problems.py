"""The one place provider errors become HTTP answers, and the metav1.Status bodies.

Called by every kubelet route before a response starts (and by the remote-command
session for the error channel). Messages are the provider's own text: providers never
put secrets in error strings (I4), and nothing else is added here.
Tests: tests/vnode/kubelet/test_kubelet_params.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from providers import errors

REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed", 500: "InternalError"}
REASONS.update({429: "TooManyRequests", 501: "NotImplemented", 503: "ServiceUnavailable"})


@dataclass(frozen=True)
class Problem(Exception):
    """An HTTP error answer: status code, message, optional Retry-After seconds."""

    code: int
    message: str
    retry_after: float | None = None

    def body(self) -> bytes:
        return status_json(self.code, self.message)

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after is not None:
            headers.append((b"retry-after", str(max(1, round(self.retry_after))).encode()))
        return headers


def status_json(code: int, message: str) -> bytes:
    """A metav1.Status with kind and apiVersion, as the API server relays it to kubectl."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "InternalError"),
        "code": code,
    }
    return json.dumps(status).encode()


def problem_from(exc: BaseException) -> Problem:
    """Map a provider error (or anything else) to its HTTP answer.

    NotFound and NotSupported are 404: the Pod, its instance, or the capability is not
    there, and the reason says which. InvalidRequest is 400. Unavailable is 503 with
    Retry-After: we could not ask, which says nothing about the instance (I3).
    """
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, (errors.NotFound, errors.NotSupported)):
        return Problem(404, str(exc))
    if isinstance(exc, errors.InvalidRequest):
        return Problem(400, str(exc))
    if isinstance(exc, errors.Unavailable):
        return Problem(503, f"provider unavailable: {exc}", retry_after=exc.retry_after or 5.0)
    if isinstance(exc, errors.ProviderError):
        return Problem(500, f"{type(exc).__name__}: {exc}")
    return Problem(500, "internal error in the kubelet API (see the manager's log)")


def exec_status(exit_code: int | None, failure: BaseException | None, *, attach: bool) -> dict[str, Any]:
    """The v4/v5 error-channel payload: Success, NonZeroExitCode with the ExitCode cause,
    or InternalError for a session that failed before an exit code existed."""
    if failure is not None:
        verb = "error attaching to container" if attach else "error executing command in container"
        inner = problem_from(failure).message
        return {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {verb}: {inner}",
            "reason": "InternalError",
            "details": {"causes": [{"message": inner}]},
            "code": 500,
        }
    if exit_code is None or exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    # kubectl parses the cause as an unsigned 8-bit number; anything else would turn a
    # failure into a protocol error, so an out-of-range code is reported as 255.
    code = exit_code if 0 < exit_code < 256 else 255
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def exec_status_bytes(
    exit_code: int | None, failure: BaseException | None, *, attach: bool, json_status: bool
) -> bytes:
    """The error channel's bytes for the negotiated protocol: JSON Status for v4/v5; for
    v1-v3, plain text on failure only (those versions cannot carry an exit code)."""
    status = exec_status(exit_code, failure, attach=attach)
    if json_status:
        return json.dumps(status, separators=(",", ":")).encode()
    return b"" if status["status"] == "Success" else str(status["message"]).encode()
