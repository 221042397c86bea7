"""The JSONPath subset of client-go's `util/jsonpath` that CRD printer columns use.

`parse` compiles a path (`.spec.providers[*].name`, `.status.conditions[?(@.type=="Ready")].status`,
`.metadata.annotations['nebula.io/pool']`, `[0]`, `[1:3]`, `.*`, `..name`); `find` returns every
value it selects, in order, with missing keys skipped (`AllowMissingKeys(true)`, as the CRD
table convertor sets). Pure; `printcolumns` is the caller. Tests: tests/devcluster/test_printcolumns.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FIELD = re.compile(r"(?:\\.|[^.\[\]\\])+")
_FILTER = re.compile(r"\?\(\s*@((?:\.[^\s=!<>)]+|\[[^\]]*\])*)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*\)")
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


class JsonPathError(ValueError):
    """The path does not parse, or a step met a value of the wrong shape (an index on a map)."""


Step = Callable[[list[Any]], list[Any]]


@dataclass(frozen=True)
class JsonPath:
    text: str
    steps: tuple[Step, ...]

    def find(self, data: Any) -> list[Any]:
        values = [data]
        for step in self.steps:
            values = step(values)
        return values


def parse(text: str) -> JsonPath:
    """Compile `text` (optionally wrapped in `{}`); JsonPathError when it is not a path."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    steps, rest = [], body
    while rest:
        step, rest = _next_step(rest, text)
        steps.append(step)
    return JsonPath(text, tuple(steps))


def _next_step(rest: str, text: str) -> tuple[Step, str]:
    if rest.startswith(".."):
        match = _FIELD.match(rest, 2)
        if match is None:
            raise JsonPathError(f"unrecognized path {text!r}: nothing after '..'")
        return _recursive(_unescape(match.group())), rest[match.end() :]
    if rest.startswith("."):
        if rest == ".":
            return (lambda values: values), ""
        match = _FIELD.match(rest, 1)
        if match is None:
            raise JsonPathError(f"unrecognized path {text!r} at {rest!r}")
        name = _unescape(match.group())
        return (_wildcard if name == "*" else _field(name)), rest[match.end() :]
    if rest.startswith("["):
        end = _closing_bracket(rest, text)
        return _bracket(rest[1:end].strip(), text), rest[end + 1 :]
    raise JsonPathError(f"unrecognized path {text!r} at {rest!r}")


def _closing_bracket(rest: str, text: str) -> int:
    quote, depth = "", 0
    for i, char in enumerate(rest):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[(":
            depth += 1
        elif char in ")]":
            depth -= 1
            if depth == 0 and char == "]":
                return i
    raise JsonPathError(f"unclosed '[' in {text!r}")


def _bracket(inner: str, text: str) -> Step:
    if inner == "*":
        return _wildcard
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        return _field(inner[1:-1])
    if inner.startswith("?"):
        return _filter(inner, text)
    if re.fullmatch(r"-?\d*(:-?\d*){0,2}", inner) and inner:
        parts = [int(p) if p else None for p in inner.split(":")]
        return _index(parts[0]) if len(parts) == 1 and parts[0] is not None else _slice(*parts)
    raise JsonPathError(f"unrecognized array step [{inner}] in {text!r}")


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def _field(name: str) -> Step:
    def step(values: list[Any]) -> list[Any]:
        return [value[name] for value in values if isinstance(value, dict) and name in value]

    return step


def _wildcard(values: list[Any]) -> list[Any]:
    found: list[Any] = []
    for value in values:
        if isinstance(value, dict):
            found += [value[key] for key in sorted(value)]
        elif isinstance(value, list):
            found += value
    return found


def _recursive(name: str) -> Step:
    def walk(value: Any, found: list[Any]) -> None:
        if isinstance(value, dict):
            if name in value:
                found.append(value[name])
            for key in sorted(value):
                walk(value[key], found)
        elif isinstance(value, list):
            for item in value:
                walk(item, found)

    def step(values: list[Any]) -> list[Any]:
        found: list[Any] = []
        for value in values:
            walk(value, found)
        return found

    return step


def _arrays(values: list[Any]) -> list[list[Any]]:
    for value in values:
        if value is not None and not isinstance(value, list):
            raise JsonPathError(f"{type(value).__name__} is not array or slice")
    return [value for value in values if isinstance(value, list)]


def _index(position: int) -> Step:
    def step(values: list[Any]) -> list[Any]:
        return [array[position] for array in _arrays(values) if -len(array) <= position < len(array)]

    return step


def _slice(start: int | None = None, stop: int | None = None, stride: int | None = None) -> Step:
    def step(values: list[Any]) -> list[Any]:
        return [item for array in _arrays(values) for item in array[start : stop : stride or 1]]

    return step


def _filter(inner: str, text: str) -> Step:
    match = _FILTER.fullmatch(inner)
    if match is None:
        raise JsonPathError(f"unrecognized filter [{inner}] in {text!r}")
    left = parse(match.group(1) or ".")
    operator, literal = match.group(2), match.group(3)
    right = _literal(literal, text) if operator else None

    def keep(item: Any) -> bool:
        found = left.find(item)
        if not operator:
            return bool(found)
        try:
            return any(_OPERATORS[operator](value, right) for value in found if _comparable(value, right))
        except TypeError:
            return False

    def step(values: list[Any]) -> list[Any]:
        return [item for array in _arrays(values) for item in array if keep(item)]

    return step


def _comparable(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)) or type(a) is type(b)


def _literal(raw: str, text: str) -> Any:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    try:
        return json.loads(raw)
    except ValueError:
        raise JsonPathError(f"unrecognized literal {raw!r} in {text!r}") from None
