"""Label and field selectors: parsing the query-string syntax and matching objects.

The HTTP layer parses `labelSelector`/`fieldSelector` once per request with these
functions; the store and watch fan-out call `.matches(obj)`. Pure: no I/O, no state,
and never mutates the objects it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_NAME}$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Characters that end an identifier in label selector syntax, as in apimachinery's lexer.
_SPECIAL = frozenset("!=(),<> \t\n")


class SelectorError(ValueError):
    """A selector string that cannot be parsed; the message is shown to the client (400)."""


@dataclass(frozen=True)
class LabelRequirement:
    """One ANDed term of a label selector. `operator` is one of
    `=`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if not present:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.operator == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: every requirement must hold. No requirements matches everything."""

    requirements: tuple[LabelRequirement, ...] = ()

    def matches_labels(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches_labels(labels) for r in self.requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        return self.matches_labels(labels if isinstance(labels, Mapping) else None)

    @property
    def empty(self) -> bool:
        return not self.requirements


@dataclass(frozen=True)
class FieldRequirement:
    """One ANDed term of a field selector: a dotted path, `=` or `!=`, and a value."""

    path: str
    operator: str
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        actual = field_value(obj, self.path)
        return (actual == self.value) == (self.operator == "=")


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: every requirement must hold. No requirements matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def exact(self, path: str) -> str | None:
        """The value an `=` term pins `path` to, if any (lets a caller narrow a scan)."""
        for r in self.requirements:
            if r.path == path and r.operator == "=":
                return r.value
        return None


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of the field at a dotted path, as the API server compares it.

    A missing field (or one that is not a scalar) compares as "", booleans as `true`/`false`.
    """
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None or isinstance(current, Mapping | list):
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str) -> FieldSelector:
    """Parse `a.b=v`, `a.b==v`, `a.b!=v` terms joined by commas; `\\,` `\\=` `\\\\` escape in values."""
    if not text.strip():
        return FieldSelector()
    requirements = []
    for term in _split_unescaped(text, ","):
        if not term.strip():
            raise SelectorError(f"invalid field selector {text!r}: empty term")
        requirements.append(_parse_field_term(term))
    return FieldSelector(tuple(requirements))


def _parse_field_term(term: str) -> FieldRequirement:
    for token, operator in (("!=", "!="), ("==", "="), ("=", "=")):
        index = _find_unescaped(term, token)
        if index >= 0:
            path = term[:index].strip()
            if not path:
                raise SelectorError(f"invalid field selector term {term!r}: missing field name")
            return FieldRequirement(path, operator, _unescape(term[index + len(token) :]))
    raise SelectorError(f"invalid field selector term {term!r}: expected field=value, field==value or field!=value")


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts if text else []


def _find_unescaped(text: str, token: str) -> int:
    index = 0
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text.startswith(token, index):
            return index
        index += 1
    return -1


def _unescape(value: str) -> str:
    out: list[str] = []
    chars = iter(value)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            if following not in ("\\", ",", "="):
                raise SelectorError(f"invalid escape sequence in field selector value {value!r}")
            out.append(following)
        else:
            out.append(char)
    return "".join(out)


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the label selector syntax: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
    `k`, `!k`, `k>1`, `k<1`, joined by commas (AND). Empty text matches everything."""
    tokens = _tokenize(text)
    if not tokens:
        return LabelSelector()
    parser = _LabelParser(tokens, text)
    return LabelSelector(tuple(parser.parse()))


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif text.startswith(("!=", "=="), index):
            tokens.append(text[index : index + 2])
            index += 2
        elif char in _SPECIAL:
            tokens.append(char)
            index += 1
        else:
            start = index
            while index < len(text) and text[index] not in _SPECIAL:
                index += 1
            tokens.append(text[start:index])
    return tokens


class _LabelParser:
    """Recursive-descent parser over the token list; one instance per parse call."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self._tokens = tokens
        self._text = text
        self._pos = 0

    def parse(self) -> list[LabelRequirement]:
        requirements = [self._requirement()]
        while self._peek() is not None:
            self._expect(",")
            requirements.append(self._requirement())
        return requirements

    def _peek(self) -> str | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _next(self) -> str | None:
        token = self._peek()
        self._pos += 1
        return token

    def _expect(self, wanted: str) -> None:
        token = self._next()
        if token != wanted:
            self._fail(f"expected {wanted!r}, found {token or 'end of input'!r}")

    def _fail(self, message: str) -> None:
        raise SelectorError(f"unable to parse label selector {self._text!r}: {message}")

    def _requirement(self) -> LabelRequirement:
        token = self._next()
        if token == "!":
            return LabelRequirement(self._key(self._next()), "!")
        key = self._key(token)
        operator = self._peek()
        if operator is None or operator == ",":
            return LabelRequirement(key, "exists")
        self._pos += 1
        if operator in ("=", "==", "!="):
            value = self._value(allow_empty=True)
            return LabelRequirement(key, "!=" if operator == "!=" else "=", (value,))
        if operator in ("in", "notin"):
            return LabelRequirement(key, operator, self._value_set())
        if operator in ("<", ">"):
            value = self._value(allow_empty=False)
            if not re.fullmatch(r"-?[0-9]+", value):
                self._fail(f"for {operator!r}, the value must be an integer, found {value!r}")
            return LabelRequirement(key, "gt" if operator == ">" else "lt", (value,))
        self._fail(f"expected an operator after {key!r}, found {operator!r}")
        raise AssertionError("unreachable")

    def _key(self, token: str | None) -> str:
        if token is None or token in _SPECIAL or token in ("!=", "=="):
            self._fail(f"expected a label key, found {token or 'end of input'!r}")
        assert token is not None
        prefix, _, name = token.rpartition("/")
        if "/" in token and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
            self._fail(f"invalid label key {token!r}: prefix must be a DNS subdomain")
        if len(name) > 63 or not _NAME_RE.match(name):
            self._fail(
                f"invalid label key {token!r}: name part must be 63 characters or less, start and end with "
                "an alphanumeric character and contain only '-', '_', '.' or alphanumerics"
            )
        return token

    def _value(self, *, allow_empty: bool) -> str:
        token = self._peek()
        if token is None or token in (",", ")"):
            if allow_empty:
                return ""
            self._fail("expected a value")
        if token in _SPECIAL or token in ("!=", "=="):
            self._fail(f"expected a value, found {token!r}")
        self._pos += 1
        assert token is not None
        if len(token) > 63 or not _NAME_RE.match(token):
            self._fail(
                f"invalid label value {token!r}: must be 63 characters or less, start and end with an "
                "alphanumeric character and contain only '-', '_', '.' or alphanumerics"
            )
        return token

    def _value_set(self) -> tuple[str, ...]:
        self._expect("(")
        values: list[str] = []
        while True:
            values.append(self._value(allow_empty=True))
            token = self._next()
            if token == ")":
                break
            if token != ",":
                self._fail(f"expected ',' or ')' in value set, found {token or 'end of input'!r}")
        if values == [""]:
            self._fail("for 'in' and 'notin', the value set cannot be empty")
        return tuple(values)
