"""Freed memory goes back to the system: the C allocator's threshold for giving a block a
mapping of its own, fixed for the long-running manager (`manage.py runvnode` sets it first).

glibc maps a request of at least its threshold (128 KiB) on its own and unmaps it when freed,
but raises the threshold to the size of each such block freed (up to 32 MiB): after that,
multi-MiB buffers (an exec stream's pump, a large list response) come from the threads' heaps
and stay resident once freed. 30 debug containers writing 10 MB each left about 140 MiB of RSS
behind; with the threshold fixed, under 12 MiB. Never undone (it holds for the process); a
no-op without glibc's `mallopt`.
Tests: tests/nebula_site/test_freedmemory.py, tests/vnode/test_ephemeral_budget.py.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>; setting it also turns the raising off
MMAP_THRESHOLD = 512 * 1024  # bytes: a block this big or bigger is mapped alone, unmapped when freed


def return_large_frees() -> bool:
    """Fix the threshold at `MMAP_THRESHOLD`; False where the C library has no `mallopt`."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
