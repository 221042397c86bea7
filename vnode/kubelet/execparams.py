"""exec/attach request parameters and stream-protocol negotiation (SPDY and websocket).

Pure. Called before any upgrade, so every refusal here is still an HTTP answer (400/403).
Tests: tests/vnode/kubelet/test_kubelet_params.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

from vnode.kubelet.logparams import MAX_QUERY
from vnode.kubelet.problems import Problem

# Newest first: the order we prefer when a client lists several.
SPDY_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
WEBSOCKET_PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
MAX_COMMAND_ARGS = 1024  # I7
MAX_COMMAND_BYTES = 64 * 1024


@dataclass(frozen=True)
class StreamRequest:
    """What an exec or attach asks for. `command` is empty for attach."""

    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def _enabled(values: Sequence[str]) -> bool:
    # The API server writes `1`; the Python client talking to us directly writes `true`.
    return bool(values) and values[0] in ("1", "true", "True", "TRUE")


def parse_stream_request(query_string: str, *, attach: bool) -> StreamRequest:
    """The validated request, or a 400 Problem (the kubelet's own messages)."""
    if len(query_string) > MAX_QUERY * 8:
        raise Problem(400, "query too long")
    values: dict[str, list[str]] = {}
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        values.setdefault(name, []).append(value)
    command = tuple(values.get("command", []))
    if len(command) > MAX_COMMAND_ARGS or sum(len(c) for c in command) > MAX_COMMAND_BYTES:
        raise Problem(400, "command too long")
    request = StreamRequest(
        command=() if attach else command,
        stdin=_enabled(values.get("input", values.get("stdin", []))),
        stdout=_enabled(values.get("output", values.get("stdout", []))),
        stderr=_enabled(values.get("error", values.get("stderr", []))),
        tty=_enabled(values.get("tty", [])),
    )
    if not (request.stdin or request.stdout or request.stderr):
        raise Problem(400, "you must specify at least one of stdin, stdout, stderr")
    if request.tty and request.stderr:
        # The upstream kubelet merges stderr into the terminal; kubectl never asks for both.
        request = StreamRequest(request.command, request.stdin, request.stdout, False, True)
    if not attach and not request.command:
        raise Problem(400, "you must specify at least one command for the container")
    return request


def split_protocols(header_values: Iterable[str]) -> list[str]:
    """Client protocols in preference order, from repeated and comma-separated headers."""
    return [p.strip() for value in header_values for p in value.split(",") if p.strip()]


def negotiate_spdy(header_values: Iterable[str]) -> str:
    """The first protocol the client offers that we speak; 400 without the header, 403
    when nothing matches (with the list we speak, as the kubelet answers)."""
    offered = split_protocols(header_values)
    if not offered:
        raise Problem(400, "unable to upgrade: X-Stream-Protocol-Version is required")
    for protocol in offered:
        if protocol in SPDY_PROTOCOLS:
            return protocol
    raise Problem(403, f"unable to upgrade: none of the offered protocols {offered} is supported")


def negotiate_websocket(offered: Sequence[str]) -> str | None:
    """The subprotocol to accept, "" for a client that offered none (the legacy binary
    protocol), or None to refuse (403, so kubectl falls back to SPDY)."""
    if not offered:
        return ""
    for protocol in offered:
        if protocol in WEBSOCKET_PROTOCOLS:
            return protocol
    return None


def json_status(protocol: str) -> bool:
    """v4 and v5 carry a JSON Status (with the exit code) on the error channel."""
    return protocol.startswith(("v4.", "v5."))


def has_resize(protocol: str) -> bool:
    """v3 added the resize stream; v1 and v2 have none."""
    return protocol not in ("channel.k8s.io", "v2.channel.k8s.io", "base64.channel.k8s.io", "")
