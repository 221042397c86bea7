"""The one error vocabulary of the embedded API server and its metav1.Status shape.

Resource behaviour raises `ApiError`; the HTTP layer turns it into a Status body with
the same code. Nothing here does I/O or knows about HTTP beyond the status code.
"""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
    502: "ServiceUnavailable",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """A failure answered to the client as a metav1.Status with `code` and `reason`."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        name: str | None = None,
        kind: str | None = None,
        group: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = _REASONS.get(code, "Unknown") if reason is None else reason
        self.name = name
        self.kind = kind
        self.group = group

    def status(self) -> dict[str, Any]:
        return failure_status(self.code, self.reason, self.message, name=self.name, kind=self.kind, group=self.group)


def failure_status(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """The Status body the real server sends; kubectl prints `Error from server (<reason>): <message>`."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    if details:
        status["details"] = details
    return status


def not_found(plural: str, name: str, *, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, f'{qualified} "{name}" not found', name=name, kind=plural, group=group or None)


def already_exists(plural: str, name: str, *, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, f'{qualified} "{name}" already exists', reason="AlreadyExists", name=name, kind=plural)


def conflict(plural: str, name: str, detail: str, *, group: str = "") -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    message = f'Operation cannot be fulfilled on {qualified} "{name}": {detail}'
    return ApiError(409, message, reason="Conflict", name=name, kind=plural)


def invalid(kind: str, name: str, detail: str) -> ApiError:
    return ApiError(422, f'{kind} "{name}" is invalid: {detail}', reason="Invalid", name=name, kind=kind)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, reason="BadRequest")
