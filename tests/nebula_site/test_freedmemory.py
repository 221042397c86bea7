"""`nebula_site.freedmemory`: with the threshold fixed, the buffers that threads grow and free
(as a stream's pump does) go back to the system; unfixed, about 150 MiB of this test's stayed
resident (glibc raised its threshold past them once the first was freed)."""

from __future__ import annotations

import threading

from nebula_site.freedmemory import return_large_frees

MIB = 1024 * 1024


def rss() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) * 1024


def pump(kept: list[list[bytes]]) -> None:
    """A buffer grown 64 KiB at a time to about 7 MiB, read from the front, then freed; small
    blocks that outlive it are allocated in between, as a pump's other work does."""
    buffer, small = bytearray(), []
    for n in range(160):
        buffer += bytes([n % 251]) * 65536
        if n % 3 == 0:
            del buffer[:65536]
        small.append(bytes(2048 + n))
    del buffer
    kept.append(small)


def test_I7_buffers_that_threads_grow_and_free_go_back_to_the_system() -> None:
    assert return_large_frees()  # glibc: the image's and the test machine's C library
    kept: list[list[bytes]] = []
    before = rss()
    threads = [threading.Thread(target=pump, args=(kept,)) for _ in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    left = rss() - before
    assert len(kept) == 30
    assert left < 32 * MIB, f"{left / MIB:.0f} MiB stayed resident (the small blocks kept are about 10 MiB)"
