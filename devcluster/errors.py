"""The one error vocabulary of the embedded API server and its metav1.Status shape.

Resource behaviour raises `ApiError`; the HTTP layer turns it into a Status body with
the same code. A 422 carries `details.causes` (one `Cause` per field error, built with
`required`, `invalid_value`, `not_supported`, ...), which kubectl prints. Nothing here
does I/O or knows about HTTP beyond the status code.
Tests: tests/devcluster/test_causes.py::test_kubectl_prints_the_field_of_a_pod_without_image.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
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
        causes: Sequence[Cause] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = _REASONS.get(code, "Unknown") if reason is None else reason
        self.name = name
        self.kind = kind
        self.group = group
        self.causes = tuple(causes)

    def status(self) -> dict[str, Any]:
        return failure_status(
            self.code,
            self.reason,
            self.message,
            name=self.name,
            kind=self.kind,
            group=self.group,
            causes=self.causes,
        )


def failure_status(
    code: int,
    reason: str,
    message: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    group: str | None = None,
    causes: Sequence[Cause] = (),
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
    if causes:
        details["causes"] = [cause.to_json() for cause in causes]
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


@dataclass(frozen=True)
class Cause:
    """One field error, as a metav1.StatusCause: `field` is the path (`spec.containers[0].image`),
    `reason` the CauseType (`FieldValueRequired`, ...), `message` the error's body as
    field.Error.ErrorBody writes it (`Required value`, `Invalid value: "x": must be ...`)."""

    field: str
    reason: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _shown(value: object) -> str:
    """A bad value as field.Error prints it: strings quoted (%q), numbers and booleans bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def _body(kind: str, detail: str) -> str:
    return f"{kind}: {detail}" if detail else kind


def required(field: str, detail: str = "") -> Cause:
    return Cause(field, "FieldValueRequired", _body("Required value", detail))


def invalid_value(field: str, value: object, detail: str = "") -> Cause:
    """`Invalid value: <value>: <detail>`; a `value` of None leaves the value out (as `field.Invalid`
    with an omitted value does)."""
    shown = "Invalid value" if value is None else f"Invalid value: {_shown(value)}"
    return Cause(field, "FieldValueInvalid", _body(shown, detail))


def not_supported(field: str, value: object, supported: Sequence[str]) -> Cause:
    choices = ", ".join(json.dumps(s) for s in supported)
    return Cause(field, "FieldValueNotSupported", f"Unsupported value: {_shown(value)}: supported values: {choices}")


def duplicate(field: str, value: object) -> Cause:
    return Cause(field, "FieldValueDuplicate", f"Duplicate value: {_shown(value)}")


def forbidden(field: str, detail: str) -> Cause:
    return Cause(field, "FieldValueForbidden", _body("Forbidden", detail))


def field_not_found(field: str, value: object) -> Cause:
    return Cause(field, "FieldValueNotFound", f"Not found: {_shown(value)}")


def type_invalid(field: str, value: object, detail: str) -> Cause:
    shown = "Invalid value" if value is None else f"Invalid value: {_shown(value)}"
    return Cause(field, "FieldValueTypeInvalid", f"{shown}: {detail}")


class FieldError(ValueError):
    """A pure validator's refusal of one field; its caller turns it into `invalid(...)`."""

    def __init__(self, cause: Cause) -> None:
        super().__init__(str(cause))
        self.cause = cause


def invalid(kind: str, name: str, causes: Sequence[Cause], *, group: str = "") -> ApiError:
    """The 422 of a failed validation, as the API server's NewInvalid builds it: the message is
    `<Kind>[.<group>] "<name>" is invalid: <cause>` (several causes: `[<c1>, <c2>]`) and every
    cause is in `details.causes`, which kubectl prints as `The <Kind> "<name>" is invalid: <field>: <msg>`."""
    if not causes:
        raise ValueError("invalid() needs at least one Cause")
    qualified = f"{kind}.{group}" if group else kind
    text = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(str(c) for c in causes) + "]"
    return ApiError(
        422,
        f'{qualified} "{name}" is invalid: {text}',
        reason="Invalid",
        name=name,
        kind=kind,
        group=group or None,
        causes=causes,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, reason="BadRequest")
