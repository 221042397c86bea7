"""The GraphQL the fake RunPod understands: a tokenizer and parser for one operation (a `query`
or `mutation`, named or not, or a bare selection set) with its arguments inlined as literals
(strings with escapes, numbers, booleans, null, enums, lists, objects), as the runpod SDK sends
them; and the projection of a resolved object onto the selection the client asked for.

Errors read as a GraphQL server writes them: a malformed document is a `Syntax Error: ...`
(HTTP 400, GRAPHQL_PARSE_FAILED), a field the type has not is `Cannot query field "x" on type
"T".` (HTTP 400, GRAPHQL_VALIDATION_FAILED). Variables and fragments are not supported (the SDK
sends neither); a document using them is refused as a syntax error.

Tests: tests/providers/runpod/test_fake_runpod_errors.py
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r'(?P<skip>[\s,]+|#[^\n]*)|(?P<punct>[{}()\[\]:])|(?P<str>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[_A-Za-z][_0-9A-Za-z]*)"
)


class GqlError(Exception):
    """An error the server answers in `errors`; `status` is the HTTP status it comes with."""

    def __init__(self, message: str, *, status: int = 200, code: str = "INTERNAL_SERVER_ERROR") -> None:
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


def syntax_error(detail: str) -> GqlError:
    return GqlError(f"Syntax Error: {detail}", status=400, code="GRAPHQL_PARSE_FAILED")


@dataclass
class Field:
    """One selected field: its arguments and, for an object, its own selection."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    selections: list[Field] | None = None


@dataclass
class Operation:
    kind: str  # "query" or "mutation"
    fields: list[Field]


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] == '"':
                raise syntax_error("Unterminated string.")
            raise syntax_error(f"Unexpected character: {text[pos]!r}.")
        pos = match.end()
        kind = match.lastgroup or "skip"
        if kind != "skip":
            tokens.append((kind, match.group()))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens, self.at = _tokens(text), 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("eof", "<EOF>")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        got_kind, got = self.peek()
        if (value is not None and got != value) or (kind is not None and got_kind != kind) or got_kind == "eof":
            wanted = f'"{value}"' if value else (kind or "token")
            raise syntax_error(f"Expected {wanted}, found {got}.")
        self.at += 1
        return got

    def document(self) -> Operation:
        kind = "query"
        if self.peek() in (("name", "query"), ("name", "mutation")):
            kind = self.take()
            if self.peek()[0] == "name":
                self.take()
        fields = self.selection_set()
        if self.peek()[0] != "eof":
            raise syntax_error(f"Unexpected {self.peek()[1]}.")
        return Operation(kind, fields)

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields = []
        while self.peek()[1] != "}":
            fields.append(self.field())
        self.take("}")
        if not fields:
            raise syntax_error("Expected Name, found }.")
        return fields

    def field(self) -> Field:
        selected = Field(self.take(kind="name"))
        if self.peek() == ("punct", "("):
            self.take("(")
            while self.peek()[1] != ")":
                name = self.take(kind="name")
                self.take(":")
                selected.args[name] = self.value()
            self.take(")")
        if self.peek() == ("punct", "{"):
            selected.selections = self.selection_set()
        return selected

    def value(self) -> Any:
        kind, token = self.peek()
        if kind == "str":
            self.take()
            return json.loads(token)
        if kind == "num":
            self.take()
            return float(token) if any(c in token for c in ".eE") else int(token)
        if kind == "name":
            self.take()
            return {"true": True, "false": False, "null": None}.get(token, token)
        if token == "[":
            self.take("[")
            items = []
            while self.peek()[1] != "]":
                items.append(self.value())
            self.take("]")
            return items
        if token == "{":
            self.take("{")
            values: dict[str, Any] = {}
            while self.peek()[1] != "}":
                name = self.take(kind="name")
                self.take(":")
                values[name] = self.value()
            self.take("}")
            return values
        raise syntax_error(f"Unexpected {token}.")


def parse(text: str) -> Operation:
    """The operation of a GraphQL document; GqlError (a syntax error) when it is malformed."""
    return _Parser(text).document()


Schema = dict[str, dict[str, str | None]]  # type -> field -> the field's object type (None: a scalar)


def validate(fields: list[Field], type_name: str, schema: Schema) -> None:
    """GraphQL's validation of a selection against `schema`, before anything runs."""
    for selected in fields:
        if selected.name not in schema[type_name]:
            raise GqlError(
                f'Cannot query field "{selected.name}" on type "{type_name}".', status=400,
                code="GRAPHQL_VALIDATION_FAILED",
            )  # fmt: skip
        child = schema[type_name][selected.name]
        if child is None and selected.selections is not None:
            raise GqlError(
                f'Field "{selected.name}" must not have a selection since its type has no subfields.',
                status=400, code="GRAPHQL_VALIDATION_FAILED",
            )  # fmt: skip
        if child is not None and selected.selections is None:
            raise GqlError(
                f'Field "{selected.name}" of type "{child}" must have a selection of subfields.',
                status=400, code="GRAPHQL_VALIDATION_FAILED",
            )  # fmt: skip
        if child is not None and selected.selections is not None:
            validate(selected.selections, child, schema)


Resolver = Callable[[dict[str, Any]], Any]


def project(value: Any, selected: Field, type_name: str) -> Any:
    """`value` (a resolved object: a dict whose `__typename` names its type and whose values are
    scalars, objects, lists, or resolvers taking the field's arguments) cut to `selected`'s
    selection."""
    if value is None:
        return None
    if isinstance(value, list):
        return [project(item, selected, type_name) for item in value]
    if not isinstance(value, dict):
        if selected.selections is not None:
            raise GqlError(
                f'Field "{selected.name}" must not have a selection since type "{type_name}" has no subfields.',
                status=400, code="GRAPHQL_VALIDATION_FAILED",
            )  # fmt: skip
        return value
    kind = str(value.get("__typename", type_name))
    if selected.selections is None:
        raise GqlError(
            f'Field "{selected.name}" of type "{kind}" must have a selection of subfields.',
            status=400, code="GRAPHQL_VALIDATION_FAILED",
        )  # fmt: skip
    out: dict[str, Any] = {}
    for sub in selected.selections:
        if sub.name not in value:
            raise GqlError(
                f'Cannot query field "{sub.name}" on type "{kind}".', status=400, code="GRAPHQL_VALIDATION_FAILED"
            )
        resolved = value[sub.name]
        if callable(resolved):
            resolved = resolved(sub.args)
        out[sub.name] = project(resolved, sub, sub.name)
    return out
