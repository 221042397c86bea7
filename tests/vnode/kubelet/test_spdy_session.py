"""vnode.kubelet.spdy session rules: round trips through ClientSession, stream-id and frame
rules, the stream errors the session answers itself, and the hard bounds (frame size, header
block size, open streams) enforced without allocating what the peer announces."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest

from vnode.kubelet import spdy, spdyframes

STREAMS = ("error", "stdin", "stdout", "stderr")


def connect(**limits: int) -> tuple[spdy.ClientSession, spdy.ServerSession, dict[str, int]]:
    """A client that opened the four exec streams on a server that replied to each."""
    client, server = spdy.ClientSession(), spdy.ServerSession(**limits)
    ids: dict[str, int] = {}
    for kind in STREAMS:
        stream_id, wire = client.open([("streamtype", kind)])
        ids[kind] = stream_id
        (opened,) = server.receive(wire)
        assert opened == spdy.StreamOpened(stream_id, (("streamtype", kind),), False)
        assert client.receive(server.reply(stream_id)) == [spdy.StreamReplied(stream_id, ())]
    return client, server, ids


def control(frame_type: int, payload: bytes, *, flags: int = 0, version: int = 3) -> bytes:
    word0 = 0x80000000 | (version << 16) | frame_type
    return struct.pack(">II", word0, (flags << 24) | len(payload)) + payload


def data(stream_id: int, payload: bytes, *, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id, (flags << 24) | len(payload)) + payload


def test_an_exec_session_round_trips_between_client_and_server() -> None:
    client, server, ids = connect()
    assert server.receive(client.send_data(ids["stdin"], b"hello", fin=True)) == [
        spdy.DataReceived(ids["stdin"], b"hello", True)
    ]
    wire = server.send_data(ids["stdout"], b"out") + server.send_data(ids["stderr"], b"err")
    wire += server.send_data(ids["error"], b"{}", fin=True) + server.finish(ids["stdout"]) + server.goaway()
    assert client.receive(wire) == [
        spdy.DataReceived(ids["stdout"], b"out", False),
        spdy.DataReceived(ids["stderr"], b"err", False),
        spdy.DataReceived(ids["error"], b"{}", True),
        spdy.DataReceived(ids["stdout"], b"", True),
        spdy.GoAwayReceived(ids["stderr"], 0),
    ]
    # Every stream still has one half open: stdin ours, the others the client's.
    assert server.open_streams() == set(ids.values())


def test_a_stream_closed_in_both_directions_leaves_the_open_set() -> None:
    client, server, ids = connect()
    server.receive(client.finish(ids["stdin"]))
    assert ids["stdin"] in server.open_streams()  # the peer's half only
    client.receive(server.finish(ids["stdin"]))
    assert ids["stdin"] not in server.open_streams()
    assert ids["stdin"] not in client.open_streams()


def test_large_data_is_split_into_frames_no_longer_than_the_bound() -> None:
    client, server, ids = connect(max_frame_size=1000)
    payload = bytes(range(256)) * 20  # 5120 bytes
    wire = server.send_data(ids["stdout"], payload, fin=True)
    assert len(wire) == len(payload) + 6 * 8  # six frames
    events = client.receive(wire)
    assert b"".join(e.data for e in events if isinstance(e, spdy.DataReceived)) == payload
    assert [e.fin for e in events if isinstance(e, spdy.DataReceived)] == [False] * 5 + [True]


def test_sent_data_frames_follow_their_own_bound_below_the_received_one() -> None:
    client, server, ids = connect(max_frame_size=1 << 20, max_data_payload=1024)
    payload = b"x" * 2500
    events = client.receive(server.send_data(ids["stdout"], payload))
    assert [len(e.data) for e in events if isinstance(e, spdy.DataReceived)] == [1024, 1024, 452]
    with pytest.raises(ValueError, match="max_data_payload"):
        spdy.ServerSession(max_data_payload=0)


def test_header_names_are_lower_cased_and_repeated_values_survive() -> None:
    client, server = spdy.ClientSession(), spdy.ServerSession()
    headers = [("StreamType", "stdin"), ("X-Multi", "a"), ("x-multi", "b"), ("Empty", ""), ("latin", "caf\xe9")]
    stream_id, wire = client.open(headers)
    (opened,) = server.receive(wire)
    assert isinstance(opened, spdy.StreamOpened)
    assert opened.headers == (
        ("streamtype", "stdin"),
        ("x-multi", "a"),
        ("x-multi", "b"),
        ("empty", ""),
        ("latin", "caf\xe9"),
    )
    (replied,) = client.receive(server.reply(stream_id, [("Status", "200"), ("version", "HTTP/1.1")]))
    assert replied == spdy.StreamReplied(stream_id, (("status", "200"), ("version", "HTTP/1.1")))


def test_one_compression_context_per_direction_carries_over_frames() -> None:
    """The second block only makes sense after the first: a fresh inflater cannot read it."""
    client = spdy.ClientSession()
    client.open([("streamtype", "error")])
    _, second = client.open([("streamtype", "stdin")])
    block = second[18:]
    with pytest.raises(zlib.error):
        zlib.decompressobj(zdict=spdyframes.DICTIONARY).decompress(block)


def test_odd_pings_are_reported_for_echo_and_answers_reach_the_client() -> None:
    client, server, _ = connect()
    (ping,) = server.receive(client.ping(1))
    assert ping == spdy.PingReceived(1)
    assert client.receive(server.ping(ping.ping_id)) == [spdy.PingAnswered(1)]
    assert server.receive(spdyframes.ping_frame(2)) == []  # an answer to a ping the server never sent
    assert client.receive(server.ping(2)) == [spdy.PingReceived(2)]


def test_settings_window_update_and_unknown_control_types_are_skipped() -> None:
    _, server, ids = connect()
    wire = control(spdyframes.SETTINGS, struct.pack(">III", 1, 7, 1 << 20))
    wire += control(spdyframes.WINDOW_UPDATE, struct.pack(">II", 0, 65536))
    wire += control(5, b"")  # NOOP
    wire += control(10, b"credential-ish")
    wire += control(0xFFFF, b"x" * 100)
    wire += data(ids["stdin"], b"after")
    assert server.receive(wire) == [spdy.DataReceived(ids["stdin"], b"after", False)]


def test_a_peer_reset_drops_the_stream_and_later_sends_return_nothing() -> None:
    client, server, ids = connect()
    assert server.receive(client.reset(ids["stdout"])) == [spdy.StreamReset(ids["stdout"], spdyframes.CANCEL)]
    assert ids["stdout"] not in server.open_streams()
    assert server.send_data(ids["stdout"], b"late") == b""
    assert server.finish(ids["stdout"]) == b""
    assert server.reset(ids["stdout"]) == b""
    assert server.reply(ids["stdout"]) == b""
    assert server.receive(data(ids["stdout"], b"in flight")) == []  # a late frame, not an error


def test_data_on_a_stream_never_opened_is_answered_invalid_stream_at_the_next_write() -> None:
    _, server, ids = connect()
    assert server.receive(data(99, b"?")) == []
    assert server.receive(data(100, b"?")) == []
    piggybacked = server.send_data(ids["stdout"], b"x")
    expected = spdyframes.rst_stream_frame(99, spdyframes.INVALID_STREAM)
    expected += spdyframes.rst_stream_frame(100, spdyframes.INVALID_STREAM)
    assert piggybacked == expected + spdyframes.data_head(ids["stdout"], 0, 1) + b"x"
    assert server.data_to_send() == b""


def test_data_after_the_peers_fin_resets_the_stream() -> None:
    client, server, ids = connect()
    server.receive(client.finish(ids["stdin"]))
    events = server.receive(data(ids["stdin"], b"too late"))
    assert events == [spdy.StreamReset(ids["stdin"], spdyframes.STREAM_ALREADY_CLOSED)]
    assert server.data_to_send() == spdyframes.rst_stream_frame(ids["stdin"], spdyframes.STREAM_ALREADY_CLOSED)


def test_headers_with_fin_half_close_the_stream() -> None:
    deflater = spdyframes.HeaderDeflater()  # the client's one zlib stream, for both frames
    wire = spdyframes.syn_stream_frame(1, deflater.compress([("streamtype", "stdin")]))
    wire += control(spdyframes.HEADERS, struct.pack(">I", 1) + deflater.compress([("x", "y")]), flags=1)
    assert spdy.ServerSession().receive(wire) == [
        spdy.StreamOpened(1, (("streamtype", "stdin"),), False),
        spdy.DataReceived(1, b"", True),
    ]


def test_a_header_block_from_another_compression_stream_is_refused() -> None:
    client, server = spdy.ClientSession(), spdy.ServerSession()
    server.receive(client.open([("streamtype", "stdin")])[1])
    stranger = spdyframes.HeaderDeflater()
    stranger.compress([])
    with pytest.raises(spdy.ProtocolError):  # it inflates to garbage or not at all
        server.receive(spdyframes.syn_stream_frame(3, stranger.compress([("streamtype", "x")])))


def test_more_streams_than_the_bound_are_refused_with_rst_stream() -> None:
    client, server = spdy.ClientSession(), spdy.ServerSession(max_streams=2)
    events = [event for _ in range(3) for event in server.receive(client.open([("streamtype", "x")])[1])]
    assert [e.stream_id for e in events if isinstance(e, spdy.StreamOpened)] == [1, 3]
    assert server.data_to_send() == spdyframes.rst_stream_frame(5, spdyframes.REFUSED_STREAM)
    assert server.open_streams() == {1, 3}
    assert server.goaway()[8:12] == struct.pack(">I", 3)  # the refused stream was not processed


def test_I7_a_burst_of_refused_streams_stalls_parsing_at_the_pending_bound_and_nothing_is_lost() -> None:
    """More refusals than MAX_PENDING_FRAMES in one read: parsing stops there (`stalled`), the
    caller writes that batch and asks again; every stream is refused once, in order, and the
    session never holds more than the bound."""
    client, server = spdy.ClientSession(), spdy.ServerSession(max_streams=2)
    wire = b"".join(client.open([("streamtype", "x")])[1] for _ in range(2 + 3 * spdy.MAX_PENDING_FRAMES + 5))
    opened = [e.stream_id for e in server.receive(wire) if isinstance(e, spdy.StreamOpened)]
    refused: list[bytes] = []
    while True:
        batch = server.data_to_send()
        assert len(batch) <= spdy.MAX_PENDING_FRAMES * 16  # RST_STREAM frames are 16 bytes
        refused += [batch[i : i + 16] for i in range(0, len(batch), 16)]
        if not server.stalled:
            break
        assert server.receive(b"") == []
    assert opened == [1, 3]
    first_refused = 5
    expected = [
        spdyframes.rst_stream_frame(first_refused + 2 * n, spdyframes.REFUSED_STREAM) for n in range(len(refused))
    ]
    assert refused == expected and len(refused) == 3 * spdy.MAX_PENDING_FRAMES + 5


@pytest.mark.parametrize(
    "wire, rule",
    [
        (data(0, b"x"), "DATA frame on stream 0"),
        (control(spdyframes.SYN_STREAM, b"\x00" * 4), "shorter than 10"),
        (control(spdyframes.PING, b"\x00" * 5), "PING payload must be 4"),
        (control(spdyframes.GOAWAY, b"\x00" * 4), "GOAWAY payload must be 8"),
        (control(spdyframes.RST_STREAM, struct.pack(">II", 1, 0)), "status 0"),
        (control(spdyframes.RST_STREAM, struct.pack(">II", 0, 5)), "stream id 0"),
        (control(spdyframes.SETTINGS, struct.pack(">I", 2) + b"\x00" * 8), "announces 2 entries"),
        (control(spdyframes.WINDOW_UPDATE, b""), "WINDOW_UPDATE payload must be 8"),
        (control(spdyframes.PING, struct.pack(">I", 1), version=2), "SPDY version 2"),
        (spdyframes.syn_reply_frame(1, spdyframes.HeaderDeflater().compress([])), "a server opens no streams"),
        (control(spdyframes.SYN_STREAM, struct.pack(">IIBB", 1, 0, 0, 0) + b"garbage"), "does not inflate"),
    ],
)
def test_malformed_frames_are_protocol_errors(wire: bytes, rule: str) -> None:
    with pytest.raises(spdy.ProtocolError, match=rule):
        spdy.ServerSession().receive(wire)


def test_stream_ids_must_be_odd_and_increasing() -> None:
    deflater = spdyframes.HeaderDeflater()
    server = spdy.ServerSession()
    server.receive(spdyframes.syn_stream_frame(3, deflater.compress([("streamtype", "a")])))
    with pytest.raises(spdy.ProtocolError, match="does not exceed 3"):
        server.receive(spdyframes.syn_stream_frame(1, deflater.compress([("streamtype", "b")])))
    with pytest.raises(spdy.ProtocolError, match="wrong parity"):
        spdy.ServerSession().receive(spdyframes.syn_stream_frame(2, spdyframes.HeaderDeflater().compress([])))


def test_a_failed_session_stays_failed() -> None:
    server = spdy.ServerSession()
    with pytest.raises(spdy.ProtocolError):
        server.receive(data(0, b""))
    with pytest.raises(spdy.ProtocolError, match="already failed"):
        server.receive(spdy.ClientSession().ping(1))
    assert server.goaway(spdyframes.GOAWAY_PROTOCOL_ERROR) == spdyframes.goaway_frame(0, 1)


def test_syn_streams_after_our_goaway_are_ignored() -> None:
    client, server, _ = connect()
    server.goaway()
    assert server.receive(client.open([("streamtype", "late")])[1]) == []
    assert server.data_to_send() == b""


def refused_peak(server: spdy.ServerSession, frame: bytes, *, match: str) -> int:
    """The peak of traced memory while `server` refuses `frame` with a ProtocolError matching `match`."""
    tracemalloc.start()
    try:
        with pytest.raises(spdy.ProtocolError, match=match):
            server.receive(frame)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_16_mib_frame_is_refused_from_its_header_without_allocating_it() -> None:
    server = spdy.ServerSession()
    head = data(1, b"")[:4] + struct.pack(">I", (1 << 24) - 1)  # 16 MiB - 1 announced
    peak = refused_peak(server, head, match="exceeds the 1048576 byte bound")
    assert peak < 64 << 10


def test_an_oversized_control_frame_is_refused_before_its_body_arrives() -> None:
    server = spdy.ServerSession(max_frame_size=4096)
    assert server.receive(spdy.ClientSession().open([("streamtype", "a")])[1])
    with pytest.raises(spdy.ProtocolError, match="exceeds the 4096"):
        server.receive(control(spdyframes.SYN_STREAM, b"")[:5] + b"\x00\x10\x01")


def test_a_zlib_bomb_in_a_header_block_is_refused_within_the_bound() -> None:
    """32 MiB of inflated header block in about 32 KB of frame: refused after 64 KiB + 1."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=spdyframes.DICTIONARY)
    bomb = deflater.compress(struct.pack(">II", 1, 32 << 20))
    chunk = b"a" * (1 << 20)
    for _ in range(32):
        bomb += deflater.compress(chunk)
    bomb += deflater.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 200_000
    frame = control(spdyframes.SYN_STREAM, struct.pack(">IIBB", 1, 0, 0, 0) + bomb)
    server = spdy.ServerSession(max_header_block=64 << 10)
    peak = refused_peak(server, frame, match="inflates past 65536")
    # The frame itself (copied twice at most), the 64 KiB bound and zlib's own state; never 32 MiB.
    assert peak < 3 * len(frame) + (64 << 10) + (512 << 10)


def test_the_default_header_bound_also_holds_against_a_bomb() -> None:
    deflater = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=spdyframes.DICTIONARY)
    bomb = deflater.compress(b"\x00" * (8 << 20)) + deflater.flush(zlib.Z_SYNC_FLUSH)
    frame = control(spdyframes.SYN_STREAM, struct.pack(">IIBB", 1, 0, 0, 0) + bomb)
    with pytest.raises(spdy.ProtocolError, match="inflates past 262144"):
        spdy.ServerSession().receive(frame)


def test_a_block_of_countless_empty_values_is_refused_before_it_becomes_objects() -> None:
    deflater = spdyframes.HeaderDeflater()
    nulls = spdyframes.syn_stream_frame(1, deflater.compress([("streamtype", "\x00" * 100_000)]))
    with pytest.raises(spdy.ProtocolError, match="more than 256 values"):
        spdy.ServerSession().receive(nulls)
    many = spdyframes.syn_stream_frame(1, spdyframes.HeaderDeflater().compress([(f"h{n}", "") for n in range(300)]))
    with pytest.raises(spdy.ProtocolError, match="300 pairs"):
        spdy.ServerSession().receive(many)


def test_sending_validates_its_arguments() -> None:
    server = spdy.ServerSession()
    with pytest.raises(ValueError):
        server.reset(1, 0)
    with pytest.raises(ValueError):
        server.ping(-1)
    with pytest.raises(ValueError):
        spdy.ServerSession(max_frame_size=1 << 24)
    assert server.send_data(1, b"nobody") == b""
