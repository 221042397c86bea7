"""The short fuzz run of bench/fuzz_spdy.py: mutated kubectl sessions, cut at random offsets,
make ServerSession raise nothing but ProtocolError, and no input costs more memory than its
bound (the input, a frame, a header block, zlib's state)."""

from __future__ import annotations

import random
import sys
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from vnode.kubelet import spdy

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import fuzz_spdy  # noqa: E402


@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_spdy.fuzz_inputs())
def test_mutated_sessions_raise_nothing_but_protocol_error(case: tuple[bytes, list[int], int]) -> None:
    data, cuts, which = case
    try:
        fuzz_spdy.drive(data, cuts, fuzz_spdy.LIMITS[which])
    except spdy.ProtocolError:
        pass


def test_every_seed_is_driven_and_the_kubectl_ones_cleanly() -> None:
    for seed in fuzz_spdy.captured_sessions():
        fuzz_spdy.drive(seed, [], {})
    assert len(fuzz_spdy.SEEDS) >= 4


def test_no_input_allocates_more_than_its_bound() -> None:
    generator = random.Random(5)
    programs = [generator.randbytes(generator.randrange(7, 160)) for _ in range(1000)]
    tracemalloc.start()
    try:
        for program in programs:
            data, cuts, which = fuzz_spdy.decode_case(program)
            limits = fuzz_spdy.LIMITS[which]
            tracemalloc.reset_peak()
            baseline = tracemalloc.get_traced_memory()[0]
            try:
                fuzz_spdy.drive(data, cuts, limits)
            except spdy.ProtocolError:
                pass
            used = tracemalloc.get_traced_memory()[1] - baseline
            assert used <= fuzz_spdy.memory_bound(data, limits), program.hex()
    finally:
        tracemalloc.stop()
