"""Request heads for the devcluster's handler: the request line and header fields, parsed with
http.server's bounds and results but without the email parser on the common path.

`server.Handler.parse_request` calls `parse_request` here instead of http.server's; the
reply side's cached `Date` (`http_date`) lives here too. It must never accept a head http.server
rejects, nor read one differently. Tests: tests/devcluster/test_httphead.py, test_server.py.
"""

from __future__ import annotations

import email.parser
import email.utils
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from http.client import HTTPException, HTTPMessage, LineTooLong
from http.server import BaseHTTPRequestHandler
from typing import Protocol

MAXLINE = 65536  # http.client._MAXLINE: the longest header line, terminator included
MAXHEADERS = 100  # http.client._MAXHEADERS: lines read, the blank line that ends them included

# One plain field line as email's compat32 parser reads it: a name of the characters its
# header pattern allows ([\041-\071\073-\176], so no space, no colon), a colon, optional blanks
# (which it strips), then a value with no CR or LF (kept as is, trailing blanks included).
# Any other line (obs-fold, a bare CR, "From ", no colon, an empty name) goes to email itself.
_FIELD = re.compile(rb"([!-9;-~]+):[ \t]*([^\r\n]*)\r?\n")


class LineReader(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


@dataclass
class Head:
    """The parsed header fields: the stdlib message, and two lower-cased lookups of it."""

    message: HTTPMessage
    last: dict[str, str] = field(default_factory=dict)  # name -> last value (a dict of items())
    first: dict[str, str] = field(default_factory=dict)  # name -> first value (Message.get)


def read_header_lines(fp: LineReader) -> list[bytes]:
    """http.client._read_headers: lines up to and including the blank one (or EOF), bounded."""
    lines: list[bytes] = []
    while True:
        line = fp.readline(MAXLINE + 1)
        if len(line) > MAXLINE:
            raise LineTooLong("header line")
        lines.append(line)
        if len(lines) > MAXHEADERS:
            raise HTTPException(f"got more than {MAXHEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            return lines


def parse_header_lines(lines: list[bytes]) -> Head:
    """What `http.client.parse_headers` makes of `lines`, with plain lines parsed directly."""
    pairs: list[tuple[str, str]] = []
    for line in lines[:-1]:
        match = _FIELD.fullmatch(line)
        if match is None:
            return _head(email_message(lines))
        pairs.append((match[1].decode("iso-8859-1"), match[2].decode("iso-8859-1")))
    message = HTTPMessage()
    for name, value in pairs:
        message.set_raw(name, value)
    return _head(message, pairs)


def email_message(lines: list[bytes]) -> HTTPMessage:
    """The stdlib's own reading of a head (http.client.parse_headers after _read_headers)."""
    text = b"".join(lines).decode("iso-8859-1")
    parsed = email.parser.Parser(_class=HTTPMessage).parsestr(text)
    assert isinstance(parsed, HTTPMessage)
    return parsed


def _head(message: HTTPMessage, pairs: list[tuple[str, str]] | None = None) -> Head:
    head = Head(message)
    for name, value in message.items() if pairs is None else pairs:
        low = name.lower()
        head.last[low] = value
        head.first.setdefault(low, value)
    return head


_date: tuple[int, str] = (-1, "")


def http_date(now: float) -> str:
    """`email.utils.formatdate(now, usegmt=True)`, formatted once per second."""
    global _date
    second = int(now)
    cached = _date
    if cached[0] != second:
        cached = (second, email.utils.formatdate(second, usegmt=True))
        _date = cached
    return cached[1]


def parse_request(handler: BaseHTTPRequestHandler, raw_requestline: bytes) -> Head | None:
    """`BaseHTTPRequestHandler.parse_request` of Python 3.11 with the header reading above.

    The request-line checks are the stdlib's, line for line, and set the same attributes on
    `handler`; None when the request failed (the error already answered), else the head.
    """
    handler.command = None  # type: ignore[assignment]  # as the stdlib: no command until parsed
    handler.request_version = version = handler.default_request_version
    handler.close_connection = True
    requestline = str(raw_requestline, "iso-8859-1").rstrip("\r\n")
    handler.requestline = requestline
    words = requestline.split()
    if len(words) == 0:
        return None
    if len(words) >= 3:
        version = words[-1]
        try:
            if not version.startswith("HTTP/"):
                raise ValueError
            base_version_number = version.split("/", 1)[1]
            parts = base_version_number.split(".")
            if len(parts) != 2:
                raise ValueError
            if any(not component.isdigit() for component in parts):
                raise ValueError("non digit in http version")
            if any(len(component) > 10 for component in parts):
                raise ValueError("unreasonable length http version")
            version_number = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            handler.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
            return None
        if version_number >= (1, 1) and handler.protocol_version >= "HTTP/1.1":
            handler.close_connection = False
        if version_number >= (2, 0):
            handler.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"Invalid HTTP version ({base_version_number})")
            return None
        handler.request_version = version
    if not 2 <= len(words) <= 3:
        handler.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
        return None
    command, path = words[:2]
    if len(words) == 2:
        handler.close_connection = True
        if command != "GET":
            handler.send_error(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({command!r})")
            return None
    handler.command, handler.path = command, path
    if handler.path.startswith("//"):
        handler.path = "/" + handler.path.lstrip("/")  # gh-87389: no open redirect through //host
    try:
        head = parse_header_lines(read_header_lines(handler.rfile))
    except LineTooLong as err:
        handler.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(err))
        return None
    except HTTPException as err:
        handler.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(err))
        return None
    handler.headers = head.message
    conntype = head.first.get("connection", "").lower()
    if conntype == "close":
        handler.close_connection = True
    elif conntype == "keep-alive" and handler.protocol_version >= "HTTP/1.1":
        handler.close_connection = False
    expect = head.first.get("expect", "")
    continuing = handler.protocol_version >= "HTTP/1.1" and handler.request_version >= "HTTP/1.1"
    if expect.lower() == "100-continue" and continuing and not handler.handle_expect_100():
        return None
    return head
