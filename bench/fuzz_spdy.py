"""Fuzz the SPDY parser: hypothesis mutates real kubectl sessions and feeds them, cut at random
offsets, to `vnode.kubelet.spdy.ServerSession` driven as the kubelet drives it.

Prints the number of inputs, the time, the peak RSS and every exception seen, by type; the
only acceptable one is `ProtocolError`. Seeds: the kubectl captures (when present) and
synthetic sessions covering every frame type. tests/vnode/kubelet/test_spdy_fuzz.py runs a
short version of the same harness.
Usage: python bench/fuzz_spdy.py [--examples 100000] [--seed 0] [--trace-every 50]
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import signal
import struct
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vnode.kubelet import spdy, spdyframes  # noqa: E402

# Copied from the shared reference into the repository, so a clean clone has them.
CAPTURES = Path(
    os.environ.get(
        "NEBULA_KUBECTL_CAPTURES",
        str(Path(__file__).resolve().parents[1] / "tests" / "vnode" / "kubelet" / "captures"),
    )
)

# Small bounds make mutated lengths hit them often; the defaults are fuzzed too.
LIMITS: tuple[dict[str, int], ...] = (
    {"max_frame_size": 4096, "max_header_block": 2048, "max_streams": 4},
    {},
)


class Hang(Exception):
    """One input took longer than the watchdog allows."""


def captured_sessions() -> list[bytes]:
    """The client->kubelet SPDY bytes of every capture, after the upgrade request head."""
    seeds = []
    for decoded in sorted(CAPTURES.glob("*/decoded.txt")):
        if "decoded as spdy" not in decoded.read_text():
            continue
        raw = (decoded.parent / "to-kubelet.bin").read_bytes()
        seeds.append(raw[raw.index(b"\r\n\r\n") + 4 :])
    return seeds


def synthetic_sessions() -> list[bytes]:
    """Sessions our own client writes, reaching what kubectl never sends."""
    client = spdy.ClientSession()
    exec_like = b"".join(client.open([("streamtype", kind)])[1] for kind in ("error", "stdin", "stdout", "resize"))
    exec_like += client.send_data(3, b"echo hi\n") + client.send_data(7, b'{"Width":80,"Height":24}\n')
    exec_like += client.ping(1) + client.send_data(3, b"x" * 5000, fin=True) + client.reset(5) + client.goaway()
    exec_like += client.open([("streamtype", "after-goaway")])[1]

    deflater = spdyframes.HeaderDeflater()
    odd = spdyframes.syn_stream_frame(1, deflater.compress([("streamtype", "stdin"), ("a", "b"), ("a", "c")]))
    odd += _headers(1, deflater.compress([("x-more", "1")])) + _headers(3, deflater.compress([]))
    odd += spdyframes.syn_reply_frame(1, deflater.compress([]))
    odd += spdyframes.control_head(spdyframes.SETTINGS, 0, 12) + struct.pack(">III", 1, 7, 1 << 20)
    odd += spdyframes.control_head(spdyframes.WINDOW_UPDATE, 0, 8) + struct.pack(">II", 1, 1 << 16)
    odd += spdyframes.control_head(5, 0, 0) + spdyframes.control_head(10, 0, 3) + b"abc"
    odd += spdyframes.data_head(1, 1, 3) + b"end" + spdyframes.data_head(1, 0, 1) + b"!"

    crowd_client = spdy.ClientSession()  # more streams than any bound, then data everywhere
    crowd = b"".join(crowd_client.open([("streamtype", f"s{n}")])[1] for n in range(20))
    crowd += b"".join(spdyframes.data_head(stream_id, 0, 1) + b"d" for stream_id in range(1, 600, 2))

    # Stored (level 0) header blocks: mutations then reach the uncompressed name/value parser.
    stored = zlib.compressobj(0, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=spdyframes.DICTIONARY)
    plain = b""
    for stream_id, headers in ((1, [("streamtype", "error")]), (3, [("streamtype", "stdin"), ("k", "v\x00w")])):
        block = spdyframes.pack_header_block(headers)
        plain += spdyframes.syn_stream_frame(stream_id, stored.compress(block) + stored.flush(zlib.Z_SYNC_FLUSH))
    big = spdyframes.pack_header_block([("x-big", "v" * 3000)])  # past the small header bound
    plain += spdyframes.syn_stream_frame(5, stored.compress(big) + stored.flush(zlib.Z_SYNC_FLUSH))
    return [exec_like, odd, crowd, plain]


def _headers(stream_id: int, block: bytes) -> bytes:
    payload = struct.pack(">I", stream_id) + block
    return spdyframes.control_head(spdyframes.HEADERS, 0, len(payload)) + payload


def frame_starts(data: bytes) -> list[int]:
    """Offsets of the frames of a well-formed seed (mutations aim at their headers)."""
    starts, offset = [], 0
    while offset + 8 <= len(data):
        starts.append(offset)
        offset += 8 + (struct.unpack_from(">I", data, offset + 4)[0] & 0xFFFFFF)
    return starts


SEEDS = captured_sessions() + synthetic_sessions()
STARTS = [frame_starts(s) for s in SEEDS]
WORDS = (0, 1, 2, 3, 4, 5, 6, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
LENGTHS = (0, 1, 3, 4, 7, 8, 9, 10, 4095, 4096, 4097, (1 << 20) + 1, (1 << 24) - 1)


def decode_case(program: bytes) -> tuple[bytes, list[int], int]:
    """Turn hypothesis' bytes into (input, cut offsets, index into LIMITS).

    Byte 0 picks a seed (or, past the last seed, the rest of `program` is the input itself),
    byte 1 the limits, byte 2 how many cuts (two bytes each follow); then each group of four
    bytes is one mutation. A byte program keeps hypothesis' per-example cost low (one draw)
    and still shrinks well.
    """
    if len(program) < 3:
        program = program.ljust(3, b"\x00")
    choice, which, cut_count = program[0] % (len(SEEDS) + 1), program[1] % len(LIMITS), program[2] % 7
    rest = program[3 + 2 * cut_count :]
    if choice == len(SEEDS):
        data = bytearray(rest)
    else:
        data = bytearray(SEEDS[choice])
        for index in range(0, len(rest) - 3, 4):
            _mutate(data, STARTS[choice], rest[index : index + 4], rest[index + 4 : index + 36])
    cut_bytes = program[3 : 3 + 2 * cut_count]
    cuts = sorted(int.from_bytes(cut_bytes[i : i + 2], "big") % (len(data) + 1) for i in range(0, len(cut_bytes), 2))
    return bytes(data), cuts, which


def _mutate(data: bytearray, starts: list[int], op: bytes, spare: bytes) -> None:
    """One mutation; `op` is four bytes (kind, then three arguments), `spare` supplies new bytes."""
    kind, a, b, c = op[0] % 11, op[1], op[2], op[3]
    size = len(data)
    position = ((a << 8) | b) % size if size else 0
    if kind == 0 and size:
        data[position] ^= c or 1
    elif kind == 1:
        data[position:position] = spare[: 1 + c % 32] or b"\xff"
    elif kind == 2 and size:
        del data[position : position + 1 + c % 64]
    elif kind == 3 and size:
        data[position:position] = data[position : position + 1 + c * 2]  # replayed frames, reused ids
    elif kind == 4:
        other = SEEDS[c % len(SEEDS)]
        data[position:] = other[((b << 8) | c) % (len(other) + 1) :]
    elif starts and (start := starts[a % len(starts)]) + 8 <= size:
        if kind == 5:  # the 24-bit length
            data[start + 5 : start + 8] = LENGTHS[c % len(LENGTHS)].to_bytes(3, "big")
        elif kind == 6:  # control type, or low bits of a DATA frame's stream id
            data[start + 2 : start + 4] = (c % 13).to_bytes(2, "big")
        elif kind == 7:
            data[start + 4] = (0, 1, 2, 3, 0x80, 0xFF)[c % 6]
        elif kind == 8:  # control bit flipped: control <-> data
            data[start] ^= 0x80
        elif kind == 9:  # another version
            data[start + 1] = c % 5
        elif start + 12 <= size:  # the first payload word: a stream id, a ping id, a count
            data[start + 8 : start + 12] = WORDS[c % len(WORDS)].to_bytes(4, "big")


def fuzz_inputs() -> st.SearchStrategy[tuple[bytes, list[int], int]]:
    return st.binary(min_size=7, max_size=160).map(decode_case)


def drive(data: bytes, cuts: list[int], limits: dict[str, int]) -> None:
    """Feed `data` in pieces to a ServerSession and answer its events as the kubelet would."""
    session = spdy.ServerSession(**limits)
    previous = 0
    try:
        for cut in [*cuts, len(data)]:
            piece = data[previous:cut]
            while True:  # as spdyconn does: a stalled session parses on once its refusals are sent
                for event in session.receive(piece):
                    if isinstance(event, spdy.StreamOpened):
                        session.reply(event.stream_id)
                    elif isinstance(event, spdy.DataReceived):
                        session.send_data(event.stream_id, event.data[:100], fin=event.fin)
                    elif isinstance(event, spdy.PingReceived):
                        session.ping(event.ping_id)
                    elif isinstance(event, spdy.StreamReset):
                        session.reset(event.stream_id)
                    elif isinstance(event, spdy.GoAwayReceived):
                        session.goaway()
                if not session.stalled:
                    break
                session.data_to_send()
                piece = b""
            previous = cut
        session.data_to_send()
    except spdy.ProtocolError:
        session.goaway(spdyframes.GOAWAY_PROTOCOL_ERROR)
        raise


def memory_bound(data: bytes, limits: dict[str, int]) -> int:
    """What one input may cost at most: copies of the input, a frame, a header block, zlib state."""
    frame = limits.get("max_frame_size", 1 << 20)
    block = limits.get("max_header_block", 256 << 10)
    return 3 * len(data) + 3 * frame + 2 * block + (768 << 10)


def rss_mib() -> float:
    """Current resident set (not the peak), in MiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def traced_use(data: bytes, cuts: list[int], limits: dict[str, int]) -> int:
    """Peak bytes allocated while driving one input (tracemalloc on for that input only)."""
    tracemalloc.start()
    try:
        try:
            drive(data, cuts, limits)
        except spdy.ProtocolError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(examples: int, *, rng_seed: int, trace_every: int, watchdog: int = 10) -> dict[str, Any]:
    """Drive `examples` hypothesis inputs; every `trace_every`-th is also measured with tracemalloc."""
    seen: collections.Counter[str] = collections.Counter()
    first: dict[str, str] = {}
    stats: dict[str, Any] = {"count": 0, "slowest": 0.0, "slowest_case": None, "worst_ratio": 0.0, "traced": 0}
    rss_marks: list[tuple[int, float]] = []
    kept: list[tuple[bytes, list[int], int]] = []  # replayed later without hypothesis (see replay)

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"an input took more than {watchdog} s")

    @seed(rng_seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(fuzz_inputs())
    def one(case: tuple[bytes, list[int], int]) -> None:
        data, cuts, which = case
        limits = LIMITS[which]
        started = time.perf_counter()
        signal.alarm(watchdog)
        try:
            drive(data, cuts, limits)
            outcome = "none"
        except Exception as exc:  # noqa: BLE001 - counting every type is the point
            outcome = type(exc).__name__
            first.setdefault(outcome, f"{exc!r} on input {data[:64].hex()}")
        finally:
            signal.alarm(0)
        elapsed = time.perf_counter() - started
        if elapsed > stats["slowest"]:
            stats["slowest"], stats["slowest_case"] = elapsed, case
        if trace_every and stats["count"] % trace_every == 0 and outcome in ("none", "ProtocolError"):
            ratio = traced_use(data, cuts, limits) / memory_bound(data, limits)
            stats["worst_ratio"] = max(stats["worst_ratio"], ratio)
            stats["traced"] += 1
        seen[outcome] += 1
        stats["count"] += 1
        if len(kept) < 2000:
            kept.append(case)
        if stats["count"] % max(examples // 4, 1) == 0:
            rss_marks.append((stats["count"], rss_mib()))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        one()
    finally:
        signal.signal(signal.SIGALRM, previous)
    return {"seen": seen, "first": first, "rss_marks": rss_marks, "kept": kept, **stats}


def replay(cases: list[tuple[bytes, list[int], int]], rounds: int = 10) -> tuple[float, float]:
    """RSS before and after driving `cases` `rounds` times outside hypothesis: flat if we keep nothing."""
    before = rss_mib()
    for _ in range(rounds):
        for data, cuts, which in cases:
            try:
                drive(data, cuts, LIMITS[which])
            except spdy.ProtocolError:
                pass
    return before, rss_mib()


def retime(case: tuple[bytes, list[int], int], repeats: int = 5) -> float:
    """The best of a few runs of one input, outside hypothesis: its own cost, not a pause."""
    data, cuts, which = case
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        try:
            drive(data, cuts, LIMITS[which])
        except spdy.ProtocolError:
            pass
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--trace-every", type=int, default=50, help="measure every Nth input with tracemalloc (0: none)"
    )
    args = parser.parse_args(argv)
    captured = len(captured_sessions())
    out(f"seeds: {len(SEEDS)} ({captured} kubectl captures), rss before: {rss_mib():.1f} MiB")
    started = time.perf_counter()
    report = run(args.examples, rng_seed=args.seed, trace_every=args.trace_every)
    elapsed = time.perf_counter() - started
    out(f"inputs: {report['count']}, time: {elapsed:.1f} s ({report['count'] / elapsed:.0f}/s)")
    out(
        f"peak RSS: {peak_rss_mib():.1f} MiB; RSS along the run: "
        + ", ".join(f"{count}: {mib:.1f}" for count, mib in report["rss_marks"])
        + " MiB (hypothesis' own bookkeeping grows with the count)"
    )
    if report["traced"]:
        out(f"inputs traced: {report['traced']}, worst peak allocation: {report['worst_ratio']:.2f} of its bound")
    if report["slowest_case"] is not None:
        again = retime(report["slowest_case"])
        out(f"slowest input: {report['slowest'] * 1000:.1f} ms in the run, {again * 1000:.2f} ms re-timed alone")
    before, after = replay(report["kept"])
    out(f"replay of {len(report['kept'])} inputs x10 without hypothesis: RSS {before:.1f} -> {after:.1f} MiB")
    for outcome, count in report["seen"].most_common():
        out(f"  {outcome}: {count}")
    unexpected = {name: text for name, text in report["first"].items() if name != "ProtocolError"}
    for name, text in unexpected.items():
        out(f"UNEXPECTED {name}: {text}")
    return 1 if unexpected or report["worst_ratio"] > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
