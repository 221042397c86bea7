"""The local provider's logs: output and its arrival index read back with the kubelet's options."""

from __future__ import annotations

import io
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from providers.base import ClaimName, InstanceId, LogOptions, PodSpec, ProvisionRequest
from providers.errors import NotFound
from providers.local import LocalProvider, folder, logs, stamp
from tests.support.polling import wait_for

CLAIM = "ns-pod-abcdefghij"
STAMPED = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (.*)$")


def run(provider: LocalProvider, script: str, *, wait: bool = True) -> InstanceId:
    pod = PodSpec("ns", "pod", "uid", "main", "busybox", args=(script,))
    instance_id = provider.provision(pod, ProvisionRequest(ClaimName(CLAIM))).instance_id
    if wait:
        wait_for(lambda: (provider.root / CLAIM / "exit.json").exists())
    return instance_id


def read_all(provider: LocalProvider, instance_id: InstanceId, **options: Any) -> bytes:
    stream = provider.logs(instance_id, LogOptions(**options))
    chunks = []
    while chunk := stream.read(7):  # small reads exercise the buffering
        chunks.append(chunk)
    stream.close()
    return b"".join(chunks)


def fake_instance(provider: LocalProvider, chunks: list[tuple[str, bytes]]) -> InstanceId:
    """A finished instance folder whose log received exactly these (arrival, bytes) chunks."""
    path = provider.root / CLAIM
    path.mkdir(parents=True)
    offset, index = 0, b""
    for arrived, data in chunks:
        moment = datetime.fromisoformat(arrived.replace("Z", "+00:00"))
        index += folder.INDEX_ENTRY.pack(offset, stamp.ns_from_datetime(moment))
        offset += len(data)
    (path / folder.LOG_FILE).write_bytes(b"".join(data for _, data in chunks))
    (path / folder.LOG_INDEX_FILE).write_bytes(index)
    return InstanceId(folder.instance_id_for(provider.owner.key, CLAIM))


def test_timestamps_are_kept_or_stripped(provider: LocalProvider) -> None:
    instance_id = run(provider, "echo one; echo two >&2")
    assert read_all(provider, instance_id) == b"one\ntwo\n"
    stamped = read_all(provider, instance_id, timestamps=True).splitlines()
    assert [STAMPED.match(line).group(1) for line in stamped] == [b"one", b"two"]  # type: ignore[union-attr]


def test_a_partial_last_line_is_kept(provider: LocalProvider) -> None:
    instance_id = run(provider, "printf 'a\\nb'")
    assert read_all(provider, instance_id) == b"a\nb"
    assert STAMPED.match(read_all(provider, instance_id, timestamps=True).split(b"\n")[1])


def test_tail_limit_and_since(provider: LocalProvider) -> None:
    instance_id = run(provider, "for i in 1 2 3 4 5; do echo line$i; done")
    assert read_all(provider, instance_id, tail_lines=2) == b"line4\nline5\n"
    assert read_all(provider, instance_id, tail_lines=0) == b""
    assert read_all(provider, instance_id, tail_lines=99) == b"line1\nline2\nline3\nline4\nline5\n"
    assert read_all(provider, instance_id, limit_bytes=8) == b"line1\nli"
    assert read_all(provider, instance_id, since=datetime(2000, 1, 1, tzinfo=UTC)).count(b"\n") == 5
    assert read_all(provider, instance_id, since=datetime(2999, 1, 1)) == b""


def test_since_and_timestamps_go_by_the_chunk_each_line_began_in(provider: LocalProvider) -> None:
    instance_id = fake_instance(
        provider,
        [
            ("2026-01-01T00:00:01.000000000Z", b"old\nspans "),
            ("2026-01-01T00:00:02.500000000Z", b"two chunks\nnew\n"),
            ("2026-01-01T00:00:03.000000000Z", b"newer\n"),
            ("2026-01-01T00:00:04.000000000Z", b"last, no newline"),
        ],
    )
    since = datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    assert read_all(provider, instance_id, since=since) == b"new\nnewer\nlast, no newline"
    assert read_all(provider, instance_id, timestamps=True) == (
        b"2026-01-01T00:00:01.000000000Z old\n"
        b"2026-01-01T00:00:01.000000000Z spans two chunks\n"
        b"2026-01-01T00:00:02.500000000Z new\n"
        b"2026-01-01T00:00:03.000000000Z newer\n"
        b"2026-01-01T00:00:04.000000000Z last, no newline"
    )
    assert read_all(provider, instance_id, since=since, tail_lines=2, timestamps=True) == (
        b"2026-01-01T00:00:03.000000000Z newer\n2026-01-01T00:00:04.000000000Z last, no newline"
    )
    assert read_all(provider, instance_id, tail_lines=3, timestamps=True, limit_bytes=40) == (
        b"2026-01-01T00:00:02.500000000Z new\n2026-"
    )


def test_the_log_is_the_output_byte_for_byte(provider: LocalProvider) -> None:
    instance_id = run(provider, "head -c 40000 /dev/zero | tr '\\0' x; echo; printf 'tab\\tcr\\r\\n'; echo short")
    expected = b"x" * 40000 + b"\ntab\tcr\r\nshort\n"
    assert (provider.root / CLAIM / folder.LOG_FILE).read_bytes() == expected
    assert read_all(provider, instance_id) == expected
    assert read_all(provider, instance_id, tail_lines=3) == expected
    assert read_all(provider, instance_id, tail_lines=1) == b"short\n"
    stamped = read_all(provider, instance_id, timestamps=True)
    assert stamped.count(b"Z x") == 1 and stamped.endswith(b"Z short\n") and b"Z tab\tcr\r\n" in stamped


def test_a_log_read_without_follow_ends_where_the_log_ended_when_it_was_asked_for(provider: LocalProvider) -> None:
    instance_id = fake_instance(provider, [("2026-01-01T00:00:01.000000000Z", b"one\ntwo\nthree\n")])
    stream = provider.logs(instance_id, LogOptions(tail_lines=2))
    with (provider.root / CLAIM / folder.LOG_FILE).open("ab") as log:
        log.write(b"written while the answer is read\n")
    chunks = []
    while chunk := stream.read(4):
        chunks.append(chunk)
    assert b"".join(chunks) == b"two\nthree\n"


def test_tail_reads_a_big_file_backwards_without_reading_it_all(tmp_path: Path) -> None:
    record = b"y" * 99 + b"\n"
    path = tmp_path / "output.log"
    path.write_bytes(record * 200_000 + b"last")  # 20 MB, the last line unfinished

    class Counting(io.FileIO):
        consumed = 0

        def readinto(self, buffer: Any) -> int | None:
            count = super().readinto(buffer)
            Counting.consumed += count or 0
            return count

    with io.BufferedReader(Counting(path, "rb")) as handle:
        offset = logs.tail_offset(handle, 3)
    assert path.read_bytes()[offset:] == record * 2 + b"last"
    assert Counting.consumed < 1_000_000
    with path.open("rb") as plain:
        assert logs.tail_offset(plain, 0) == path.stat().st_size
        assert logs.tail_offset(plain, 10**9) == 0


def test_follow_streams_lines_as_they_come_and_ends_at_exit(provider: LocalProvider) -> None:
    instance_id = run(provider, "echo one; while [ ! -f go ]; do sleep 0.05; done; echo two", wait=False)
    stream = provider.logs(instance_id, LogOptions(follow=True))
    try:
        assert stream.read() == b"one\n"
        (provider.root / CLAIM / "go").touch()
        assert stream.read() == b"two\n"
        assert stream.read() == b""
    finally:
        stream.close()


def test_close_from_another_thread_unblocks_a_follow_read(provider: LocalProvider) -> None:
    instance_id = run(provider, "exec sleep 300", wait=False)
    stream = provider.logs(instance_id, LogOptions(follow=True))
    results: list[bytes] = []
    reader = threading.Thread(target=lambda: results.append(stream.read()))
    reader.start()
    time.sleep(0.2)  # let the reader block; closing earlier would be a different case
    started = time.monotonic()
    stream.close()
    reader.join(timeout=10)
    assert results == [b""] and time.monotonic() - started < 2.0


def test_previous_of_a_workload_never_restarted_is_not_found(provider: LocalProvider) -> None:
    instance_id = run(provider, "true")
    with pytest.raises(NotFound, match="no previous run: it was never restarted"):
        provider.logs(instance_id, LogOptions(previous=True))
