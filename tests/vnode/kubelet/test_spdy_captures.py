"""vnode.kubelet.spdy against what kubectl 1.20 and 1.37 really put on the wire: every SPDY
capture parses to the frames its decode lists, in whole and byte by byte, and our first
SYN_REPLYs are byte-identical to the ones both kubectls accepted."""

from __future__ import annotations

import ast
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from vnode.kubelet import spdy, spdyframes

# Copied from the shared reference into the repository, so a clean clone has them.
CAPTURES = Path(
    os.environ.get(
        "NEBULA_KUBECTL_CAPTURES",
        str(Path(__file__).resolve().parent / "captures"),
    )
)
SPDY_CAPTURES = sorted(
    path.parent.name
    for path in CAPTURES.glob("*/decoded.txt")
    if "payload after head" in path.read_text() and "decoded as spdy" in path.read_text()
)

FRAME_LINE = re.compile(r"^#\d+\s+(\w+) (.*)$")


@dataclass(frozen=True)
class Capture:
    to_kubelet: bytes  # the frames after the upgrade request head
    from_kubelet: bytes  # the frames after the 101 response head
    client_frames: list[tuple[object, ...]]
    server_frames: list[tuple[object, ...]]


def _after_head(raw: bytes) -> bytes:
    head_end = raw.index(b"\r\n\r\n") + 4
    return raw[head_end:]


def _expected(section: str) -> list[tuple[object, ...]]:
    """The frames a decode lists, in the shape `_observed` gives events."""
    frames: list[tuple[object, ...]] = []
    for line in section.splitlines():
        match = FRAME_LINE.match(line)
        if not match:
            continue
        kind, rest = match.groups()
        fields = dict(re.findall(r"(\w+)=(\S+)", rest.split(" headers=")[0].split(" data=")[0]))
        if kind in ("SYN_STREAM", "SYN_REPLY"):
            headers = tuple(ast.literal_eval(rest.split(" headers=", 1)[1]))
            frames.append((kind, int(fields["stream"]), headers))
        elif kind == "DATA":
            data_repr = rest.split(" data=", 1)[1]
            truncated = data_repr.endswith("...")
            data = ast.literal_eval(data_repr.removesuffix("..."))
            frames.append((kind, int(fields["stream"]), fields["flags"] == "FIN", int(fields["len"]), data, truncated))
        elif kind == "PING":
            frames.append((kind, int(fields["id"])))
        elif kind == "GOAWAY":
            frames.append((kind, int(fields["last_good_stream"]), int(fields["status"])))
        elif kind == "RST_STREAM":
            frames.append((kind, int(fields["stream"]), int(fields["status"])))
        else:
            raise AssertionError(f"decode lists a frame kind this test does not know: {kind}")
    return frames


def load(name: str) -> Capture:
    folder = CAPTURES / name
    decoded = (folder / "decoded.txt").read_text()
    client_part, server_part = decoded.split("### kubelet -> client", 1)
    return Capture(
        to_kubelet=_after_head((folder / "to-kubelet.bin").read_bytes()),
        from_kubelet=_after_head((folder / "from-kubelet.bin").read_bytes()),
        client_frames=_expected(client_part),
        server_frames=_expected(server_part),
    )


def _observed(events: list[spdy.ClientEvent], expected: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Events in the decode's shape; DATA shown truncated where the decode truncated it."""
    shaped: list[tuple[object, ...]] = []
    for event in events:
        match event:
            case spdy.StreamOpened(stream_id, headers, _):
                shaped.append(("SYN_STREAM", stream_id, headers))
            case spdy.StreamReplied(stream_id, headers):
                shaped.append(("SYN_REPLY", stream_id, headers))
            case spdy.DataReceived(stream_id, data, fin):
                slot = expected[len(shaped)] if len(shaped) < len(expected) else ()
                truncated = len(slot) == 6 and slot[5] is True
                shown = data[: len(slot[4])] if truncated and isinstance(slot[4], bytes) else data
                shaped.append(("DATA", stream_id, fin, len(data), shown, truncated))
            case spdy.PingReceived(ping_id) | spdy.PingAnswered(ping_id):
                shaped.append(("PING", ping_id))
            case spdy.GoAwayReceived(last, status):
                shaped.append(("GOAWAY", last, status))
            case spdy.StreamReset(stream_id, status):
                shaped.append(("RST_STREAM", stream_id, status))
    return shaped


def _client_for(capture: Capture) -> spdy.ClientSession:
    """A client that opened the capture's streams, so the server's replies make sense to it."""
    client = spdy.ClientSession()
    for frame in capture.client_frames:
        if frame[0] == "SYN_STREAM":
            stream_id, _ = client.open(frame[2])  # type: ignore[arg-type]
            assert stream_id == frame[1]
    return client


needs_captures = pytest.mark.skipif(not SPDY_CAPTURES, reason=f"no kubectl captures under {CAPTURES}")


def test_the_dictionary_is_the_spdy3_constant() -> None:
    assert len(spdyframes.DICTIONARY) == 1423
    assert zlib.adler32(spdyframes.DICTIONARY) == spdyframes.DICTIONARY_ADLER32
    assert spdyframes.DICTIONARY.count(b"\x00\x00\x00") >= 65  # 65 length-prefixed tokens


@needs_captures
def test_both_kubectl_versions_are_among_the_captures() -> None:
    assert any("1.20" in name for name in SPDY_CAPTURES) and any("1.37" in name for name in SPDY_CAPTURES)


@needs_captures
@pytest.mark.parametrize("name", SPDY_CAPTURES)
def test_every_frame_kubectl_sent_is_decoded_as_the_capture_lists(name: str) -> None:
    capture = load(name)
    events = spdy.ServerSession().receive(capture.to_kubelet)
    assert _observed(list(events), capture.client_frames) == capture.client_frames


@needs_captures
@pytest.mark.parametrize("name", SPDY_CAPTURES)
def test_kubectl_frames_fed_one_byte_at_a_time_give_the_same_events(name: str) -> None:
    capture = load(name)
    whole = spdy.ServerSession().receive(capture.to_kubelet)
    session = spdy.ServerSession()
    pieces = [
        event
        for index in range(len(capture.to_kubelet))
        for event in session.receive(capture.to_kubelet[index : index + 1])
    ]
    assert pieces == whole


@needs_captures
@pytest.mark.parametrize("name", SPDY_CAPTURES)
def test_the_kubelet_side_of_each_capture_decodes_in_a_client_session(name: str) -> None:
    capture = load(name)
    events = _client_for(capture).receive(capture.from_kubelet)
    assert _observed(events, capture.server_frames) == capture.server_frames


@needs_captures
def test_our_syn_replies_are_byte_identical_to_those_kubectl_accepted() -> None:
    capture = load("kubectl-1.20-exec-stdin-cat")
    session = spdy.ServerSession()
    opened = [event.stream_id for event in session.receive(capture.to_kubelet) if isinstance(event, spdy.StreamOpened)]
    ours = b"".join(session.reply(stream_id) for stream_id in opened)
    assert capture.from_kubelet.startswith(ours)


@needs_captures
def test_the_capture_answered_in_kind_is_what_the_kubelet_sent() -> None:
    """Replaying the server side of the stdin-cat session with ServerSession gives the captured bytes."""
    capture = load("kubectl-1.20-exec-stdin-cat")
    session = spdy.ServerSession()
    session.receive(capture.to_kubelet)
    out = b"".join(session.reply(stream_id) for stream_id in (1, 3, 5, 7))
    out += session.send_data(5, b"hello from stdin\n")
    out += session.send_data(1, b'{"metadata":{},"status":"Success"}')
    out += b"".join(session.finish(stream_id) for stream_id in (5, 7, 1, 3))
    out += session.goaway()
    assert out == capture.from_kubelet
    # kubectl FINs only stdin: error, stdout and stderr stay half-open (ours closed) until TCP closes.
    assert session.open_streams() == {1, 5, 7}
