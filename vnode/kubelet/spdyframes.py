"""SPDY/3.1 frame codec: the 8-byte frame headers, control payloads and header blocks.

Used only by `vnode.kubelet.spdy` (the sessions), which owns stream state. Pure byte work:
no sockets, no threads, no session state beyond one zlib context per direction. Every
length read from the wire is checked before it is used; bad input raises `ProtocolError`.
Tests: tests/vnode/kubelet/test_spdy_session.py.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

VERSION = 3

# Control frame types (exec-protocols.md §1.1). NOOP (5) and anything above 9 are unknown to
# spdystream and kill a Go peer's session, so we parse them only to skip them, never send them.
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

# RST_STREAM status codes (0 is invalid: the Go reader rejects it).
PROTOCOL_ERROR = 1
INVALID_STREAM = 2
REFUSED_STREAM = 3
UNSUPPORTED_VERSION = 4
CANCEL = 5
INTERNAL_ERROR = 6
FLOW_CONTROL_ERROR = 7
STREAM_IN_USE = 8
STREAM_ALREADY_CLOSED = 9

# GOAWAY status codes, as spdystream numbers them.
GOAWAY_OK = 0
GOAWAY_PROTOCOL_ERROR = 1
GOAWAY_INTERNAL_ERROR = 2

HEADER_SIZE = 8
MAX_LENGTH = (1 << 24) - 1  # the 24-bit length field
MAX_ID = (1 << 31) - 1  # stream and ping ids are 31 bits on the wire (ping ids 32, kept to 31 for symmetry)
MAX_STATUS = (1 << 32) - 1
# Kubernetes sends one pair per block; the cap keeps a block of NUL-joined empty values from
# turning 256 KiB into hundreds of thousands of Python tuples.
MAX_HEADER_PAIRS = 256

_HEAD = struct.Struct(">II")  # word 0 (control bit + version + type, or stream id), word 1 (flags + length)
_U32 = struct.Struct(">I")
_TWO_U32 = struct.Struct(">II")
_SYN_STREAM_HEAD = struct.Struct(">IIBB")  # stream id, associated id, priority, slot


class ProtocolError(Exception):
    """The peer broke SPDY/3.1 (or one of our bounds): the session cannot go on.

    The message names the rule broken and the numbers involved, never payload bytes.
    """


def _build_dictionary() -> bytes:
    """The SPDY/3 header-compression dictionary: 65 length-prefixed tokens, then a raw tail."""
    words = (
        *(
            "options head post put delete trace accept accept-charset accept-encoding accept-language "
            "accept-ranges age allow authorization cache-control connection content-base content-encoding "
            "content-language content-length content-location content-md5 content-range content-type date "
            "etag expect expires from host if-match if-modified-since if-none-match if-range "
            "if-unmodified-since last-modified location max-forwards pragma proxy-authenticate "
            "proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
            "user-agent vary via warning www-authenticate method get status"
        ).split(),
        "200 OK",  # the only token with a space in it
        *"version HTTP/1.1 url public set-cookie keep-alive origin".split(),
    )
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
        "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
        "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
        "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return b"".join(_U32.pack(len(word)) + word.encode("ascii") for word in words) + tail.encode("ascii")


DICTIONARY = _build_dictionary()
DICTIONARY_ADLER32 = 0xE3C6A7C2


# -- frame headers -----------------------------------------------------------------------------


def parse_head(buffer: bytes | bytearray, offset: int) -> tuple[int, int, int]:
    """Decode the 8-byte header at `offset`: (word0, flags, length).

    word0 has the control bit set for a control frame (then the low 16 bits are the type
    and bits 16-30 the version), else it is the data frame's stream id.
    """
    word0, word1 = _HEAD.unpack_from(buffer, offset)
    return word0, word1 >> 24, word1 & 0xFFFFFF


def control_head(frame_type: int, flags: int, length: int) -> bytes:
    return _HEAD.pack(0x80000000 | (VERSION << 16) | frame_type, (flags << 24) | length)


def data_head(stream_id: int, flags: int, length: int) -> bytes:
    return _HEAD.pack(stream_id, (flags << 24) | length)


# -- control payloads (received) ---------------------------------------------------------------


def parse_syn_stream(payload: bytes) -> tuple[int, bytes]:
    """SYN_STREAM payload -> (stream id, compressed header block)."""
    if len(payload) < _SYN_STREAM_HEAD.size:
        raise ProtocolError(f"SYN_STREAM payload of {len(payload)} bytes is shorter than 10")
    stream_id, _associated, _priority, _slot = _SYN_STREAM_HEAD.unpack_from(payload)
    return stream_id & MAX_ID, payload[_SYN_STREAM_HEAD.size :]


def parse_stream_and_block(name: str, payload: bytes) -> tuple[int, bytes]:
    """SYN_REPLY or HEADERS payload -> (stream id, compressed header block)."""
    if len(payload) < 4:
        raise ProtocolError(f"{name} payload of {len(payload)} bytes is shorter than 4")
    return _U32.unpack_from(payload)[0] & MAX_ID, payload[4:]


def parse_pair(name: str, payload: bytes) -> tuple[int, int]:
    """RST_STREAM, GOAWAY, WINDOW_UPDATE: exactly two 32-bit words, the first a 31-bit id."""
    if len(payload) != 8:
        raise ProtocolError(f"{name} payload must be 8 bytes, got {len(payload)}")
    first, second = _TWO_U32.unpack(payload)
    return first & MAX_ID, second


def parse_ping(payload: bytes) -> int:
    if len(payload) != 4:
        raise ProtocolError(f"PING payload must be 4 bytes, got {len(payload)}")
    ping_id: int = _U32.unpack(payload)[0]
    return ping_id


def check_settings(payload: bytes) -> None:
    """SETTINGS are parsed for shape and ignored: spdystream enforces no window (§1.5)."""
    if len(payload) < 4:
        raise ProtocolError(f"SETTINGS payload of {len(payload)} bytes is shorter than 4")
    count = _U32.unpack_from(payload)[0]
    if len(payload) != 4 + 8 * count:
        raise ProtocolError(f"SETTINGS announces {count} entries in {len(payload) - 4} bytes")


# -- control frames (sent) ---------------------------------------------------------------------


def syn_stream_frame(stream_id: int, block: bytes, *, flags: int = 0, priority: int = 0) -> bytes:
    payload = _SYN_STREAM_HEAD.pack(stream_id, 0, (priority & 0x7) << 5, 0) + block
    return control_head(SYN_STREAM, flags, len(payload)) + payload


def syn_reply_frame(stream_id: int, block: bytes, *, flags: int = 0) -> bytes:
    return control_head(SYN_REPLY, flags, 4 + len(block)) + _U32.pack(stream_id) + block


def rst_stream_frame(stream_id: int, status: int) -> bytes:
    return control_head(RST_STREAM, 0, 8) + _TWO_U32.pack(stream_id, status)


def ping_frame(ping_id: int) -> bytes:
    return control_head(PING, 0, 4) + _U32.pack(ping_id)


def goaway_frame(last_stream_id: int, status: int) -> bytes:
    return control_head(GOAWAY, 0, 8) + _TWO_U32.pack(last_stream_id, status)


def data_frames(stream_id: int, data: bytes, *, fin: bool, max_payload: int) -> bytes:
    """DATA frames carrying `data`, each at most `max_payload` bytes; FIN on the last one."""
    if len(data) <= max_payload:
        return data_head(stream_id, FLAG_FIN if fin else 0, len(data)) + data
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    for start in range(0, len(data), max_payload):
        chunk = view[start : start + max_payload]
        last = start + max_payload >= len(data)
        parts.append(data_head(stream_id, FLAG_FIN if fin and last else 0, len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


# -- header blocks -----------------------------------------------------------------------------


def pack_header_block(headers: Sequence[tuple[str, str]]) -> bytes:
    """The uncompressed name/value block: names lower-cased, repeated names joined with NUL."""
    merged: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        if not name:
            raise ValueError("a header name cannot be empty")
        merged.setdefault(name.lower().encode("latin-1"), []).append(value.encode("latin-1"))
    parts = [_U32.pack(len(merged))]
    for name_bytes, values in merged.items():
        joined = b"\x00".join(values)
        parts += [_U32.pack(len(name_bytes)), name_bytes, _U32.pack(len(joined)), joined]
    return b"".join(parts)


def unpack_header_block(block: bytes) -> tuple[tuple[str, str], ...]:
    """Parse an uncompressed block; names are lower-cased, NUL-joined values become pairs.

    Values are decoded as Latin-1 so any byte string round-trips; the block must end
    exactly after its last pair.
    """
    size = len(block)
    if size < 4:
        raise ProtocolError(f"header block of {size} bytes has no pair count")
    count = _U32.unpack_from(block)[0]
    if count > (size - 4) // 8:  # each pair takes at least two 4-byte lengths
        raise ProtocolError(f"header block announces {count} pairs in {size} bytes")
    if count > MAX_HEADER_PAIRS:
        raise ProtocolError(f"header block announces {count} pairs, more than {MAX_HEADER_PAIRS}")
    offset = 4
    pairs: list[tuple[str, str]] = []
    for _ in range(count):
        name, offset = _read_string(block, offset)
        value, offset = _read_string(block, offset)
        if not name:
            raise ProtocolError("header block holds an empty name")
        values = value.split(b"\x00", MAX_HEADER_PAIRS - len(pairs))
        if len(pairs) + len(values) > MAX_HEADER_PAIRS:
            raise ProtocolError(f"header block holds more than {MAX_HEADER_PAIRS} values")
        text_name = name.decode("latin-1").lower()
        pairs.extend((text_name, part.decode("latin-1")) for part in values)
    if offset != size:
        raise ProtocolError(f"header block has {size - offset} bytes after its last pair")
    return tuple(pairs)


def _read_string(block: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(block):
        raise ProtocolError("header block ends inside a length")
    length = _U32.unpack_from(block, offset)[0]
    start = offset + 4
    if length > len(block) - start:
        raise ProtocolError(f"header string of {length} bytes overruns the block")
    return block[start : start + length], start + length


class HeaderDeflater:
    """Our side's single zlib stream: one sync-flushed chunk per header block (§1.3).

    Level 9, window 15, memory level 8 as Python's defaults, which reproduce the bytes
    kubectl 1.20 and 1.37 accepted in the captures. Created on first use to keep an idle
    session small.
    """

    def __init__(self) -> None:
        self._zlib: zlib._Compress | None = None

    def compress(self, headers: Sequence[tuple[str, str]]) -> bytes:
        if self._zlib is None:
            self._zlib = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=DICTIONARY)
        block = pack_header_block(headers)
        return self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderInflater:
    """The peer's single zlib stream, inflated block by block without ever exceeding `limit`.

    A fresh inflater per frame would fail from the second frame on: every block continues
    the stream the first one opened. Output is pulled with `max_length` so a zlib bomb
    costs at most `limit` + 1 bytes before it is refused.
    """

    def __init__(self, *, limit: int) -> None:
        self._limit = limit
        self._zlib: zlib._Decompress | None = None

    def inflate(self, compressed: bytes) -> tuple[tuple[str, str], ...]:
        if self._zlib is None:
            self._zlib = zlib.decompressobj(zdict=DICTIONARY)
        inflater = self._zlib
        out = bytearray()
        pending = compressed
        try:
            while True:
                out += inflater.decompress(pending, self._limit + 1 - len(out))
                if len(out) > self._limit:
                    raise ProtocolError(f"header block inflates past {self._limit} bytes")
                if not inflater.unconsumed_tail:
                    break
                pending = inflater.unconsumed_tail
        except zlib.error as exc:
            raise ProtocolError(f"header block does not inflate: {exc}") from None
        if inflater.unused_data or inflater.eof:
            # The peer ended its zlib stream: no later block could be read, as in Go's reader.
            raise ProtocolError("header block ends the peer's compression stream")
        return unpack_header_block(bytes(out))
