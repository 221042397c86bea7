"""The request-head parser (devcluster/httphead.py): the same headers, bounds and rejections as
http.server's email-based parsing, and the reply head's Date, checked in memory and on the wire."""

from __future__ import annotations

import email.utils
import http.client
import io
import json
import socket
import ssl

import pytest

from devcluster import DevCluster, httphead
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod

HEADS: list[bytes] = [
    b"Host: x\r\nUser-Agent: a/1\r\nAccept: application/json\r\n\r\n",
    b"Host: x\r\nX-Trail: value with blanks  \t\r\nX-Lead:\t  lead\r\nX-Empty:\r\nX-None:   \r\n\r\n",
    b"Impersonate-Group: one\r\nimpersonate-group: two\r\nIMPERSONATE-GROUP: three\r\n\r\n",
    b"Host: x\nUser-Agent: lf-only\n\n",
    b"Host: x\r\nX-Latin: caf\xe9 \xff\r\n\r\n",
    b"Host: x\r\nX-Odd!#$%&'*+-.^_`|~: tchars\r\n\r\n",
    b"Host: x\r\nX-Colon: a:b: c\r\n\r\n",
    # Lines the fast path hands to email itself, which must read them as before:
    b"Host: x\r\nX-Fold: first\r\n  second\r\n\tthird\r\nAfter: y\r\n\r\n",  # obs-fold
    b"  leading continuation\r\nHost: x\r\n\r\n",
    b"Host: x\r\nX-CR: a\rb\r\nAfter: y\r\n\r\n",  # a bare CR splits email's lines
    b"Host: x\r\nNo colon here\r\nAfter: y\r\n\r\n",  # ends the headers for email
    b"Host: x\r\nName : spaced\r\nAfter: y\r\n\r\n",
    b"Host: x\r\n: empty name\r\nAfter: y\r\n\r\n",
    b"From sender\r\nHost: x\r\n\r\n",
    b"Host: x\r\nX-Ctl: \x0bvertical\x0c\x1c\x85 tab\r\n\r\n",
    b"Host: x\r\nContent-Type: multipart/mixed; boundary=z\r\n\r\n",
    b"Host: x\r\nAt: eof-without-blank",
    b"Host: x\r\n",
    b"\r\n",
]


@pytest.mark.parametrize("raw_head", HEADS)
def test_the_fast_parser_reads_every_head_as_http_client_does(raw_head: bytes) -> None:
    lines = httphead.read_header_lines(io.BytesIO(raw_head))
    assert lines == http.client._read_headers(io.BytesIO(raw_head))  # type: ignore[attr-defined]
    expected = http.client.parse_headers(io.BytesIO(raw_head))
    head = httphead.parse_header_lines(lines)
    assert head.message.items() == expected.items()
    assert head.last == {k.lower(): v for k, v in expected.items()}
    for name in {k.lower() for k in expected.keys()} | {"missing"}:
        assert head.first.get(name) == expected.get(name)
        assert head.message.get_all(name) == expected.get_all(name)


def test_repeated_headers_keep_every_value_first_for_get_and_last_for_the_request_map() -> None:
    head = httphead.parse_header_lines(httphead.read_header_lines(io.BytesIO(HEADS[2])))
    assert head.message.get_all("Impersonate-Group") == ["one", "two", "three"]
    assert head.first["impersonate-group"] == "one" and head.last["impersonate-group"] == "three"


def test_the_header_bounds_are_http_clients() -> None:
    assert (httphead.MAXLINE, httphead.MAXHEADERS) == (http.client._MAXLINE, http.client._MAXHEADERS)  # type: ignore[attr-defined]
    fits = b"X-Long: " + b"a" * (httphead.MAXLINE - 10) + b"\r\n\r\n"
    assert httphead.parse_header_lines(httphead.read_header_lines(io.BytesIO(fits))).first["x-long"]
    with pytest.raises(http.client.LineTooLong):
        httphead.read_header_lines(io.BytesIO(b"X-Long: " + b"a" * httphead.MAXLINE + b"\r\n\r\n"))
    most = b"".join(b"X-%d: v\r\n" % i for i in range(httphead.MAXHEADERS - 1)) + b"\r\n"
    assert len(httphead.parse_header_lines(httphead.read_header_lines(io.BytesIO(most))).message) == 99
    too_many = b"".join(b"X-%d: v\r\n" % i for i in range(httphead.MAXHEADERS)) + b"\r\n"
    with pytest.raises(http.client.HTTPException, match="got more than 100 headers"):
        httphead.read_header_lines(io.BytesIO(too_many))


def test_http_date_is_formatdate_of_the_same_second() -> None:
    for moment in (0.0, 1.5, 1767225599.999999, 1767225600.0, 1767225600.000001, 1796000000.25, 1796000000.75):
        assert httphead.http_date(moment) == email.utils.formatdate(moment, usegmt=True)


def _exchange(raw: Raw, data: bytes) -> bytes:
    """Send raw bytes over TLS and read the answer until the server closes the connection."""
    with socket.create_connection((raw.host, raw.port), timeout=30) as plain:
        with raw.context.wrap_socket(plain, server_hostname=raw.host) as sock:
            sock.sendall(data)
            answer = b""
            while True:
                try:
                    chunk = sock.recv(65536)
                except (ssl.SSLError, ConnectionResetError):
                    break
                if not chunk:
                    break
                answer += chunk
            return answer


def test_oversized_and_too_many_header_lines_answer_431_on_the_wire(raw: Raw) -> None:
    long_line = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * httphead.MAXLINE + b"\r\n\r\n"
    answer = _exchange(raw, long_line)
    assert answer.startswith(b"HTTP/1.1 431 Line too long\r\n")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == 431
    many = b"".join(b"X-%d: v\r\n" % i for i in range(httphead.MAXHEADERS))
    answer = _exchange(raw, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431 Too many headers\r\n")
    # Request-line errors come before a version is known: http.server answers them HTTP/0.9
    # style (the Status body alone), and so does an HTTP/0.9 GET.
    for line, code, message in [
        (b"GET /healthz HTTP/2.0", 505, "Invalid HTTP version (2.0)"),
        (b"GET /healthz HTTP/1.x", 400, "Bad request version ('HTTP/1.x')"),
        (b"POST /healthz", 400, "Bad HTTP/0.9 request type ('POST')"),
    ]:
        status = json.loads(_exchange(raw, line + b"\r\n\r\n"))
        assert (status["code"], status["message"]) == (code, message)
    assert _exchange(raw, b"GET /healthz\r\n\r\n") == b"ok"
    assert raw.request("GET", "/healthz")[0] == 200


def test_a_folded_header_and_repeated_user_agents_read_as_before(cluster: DevCluster, raw: Raw) -> None:
    cluster.request_log.clear()
    request = (
        b"GET /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nUser-Agent: first/1\r\n"
        b"User-Agent: second/2\r\nX-Fold: a\r\n b\r\nConnection: close\r\n\r\n"
    )
    answer = _exchange(raw, request)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert [r.user_agent for r in cluster.request_log] == ["first/1"]  # Message.get: the first value


def test_a_reply_head_is_what_send_response_and_send_header_wrote(raw: Raw) -> None:
    body = b'{"metadata":{"name":"p1"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    request = (
        b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    answer = _exchange(raw, request)
    head, _, reply = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 201 Created" and lines[1] == "Server: devcluster "
    date = lines[2].removeprefix("Date: ")
    assert lines[2].startswith("Date: ") and email.utils.parsedate_to_datetime(date).tzname() == "UTC"
    assert date == email.utils.formatdate(email.utils.parsedate_to_datetime(date).timestamp(), usegmt=True)
    assert lines[3:] == [
        "Content-Type: application/json",
        f"Content-Length: {len(reply)}",
        "Cache-Control: no-cache, private",
        "Connection: close",
    ]
    status, _, again = raw.request("POST", "/api/v1/namespaces/default/pods", make_pod("p1"))
    assert status == 409 and b'"reason":"AlreadyExists"' in again
