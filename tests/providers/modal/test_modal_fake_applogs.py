"""The Modal fake's AppFetchLogs and AppCountLogs through the real `modal` SDK
(`Sandbox.logs.fetch` counts then fetches; `Sandbox.logs.tail` fetches the newest): stamped
stdout and stderr entries of one sandbox only, and the since/until, source, search-text and
limit filters the SDK sends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import modal

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for
from tests.support.polling import wait_for

HOUR = timedelta(hours=1)


def _since_an_hour() -> datetime:
    return datetime.now(UTC) - HOUR


def test_fetch_gives_stamped_stdout_and_stderr_entries_in_time_order(client: Any, fake: FakeModal) -> None:
    before = datetime.now(UTC)
    sb = modal.Sandbox.create("sh", "-c", "echo out1; echo err1 >&2; echo out2", app=app_for(client), client=client)
    sb.wait()
    entries = list(sb.logs.fetch(since=_since_an_hour()))
    assert sorted((e.source, e.message) for e in entries) == [
        ("stderr", "err1\n"), ("stdout", "out1\n"), ("stdout", "out2\n"),
    ]  # fmt: skip
    assert [e.message for e in entries if e.source == "stdout"] == ["out1\n", "out2\n"]
    stamps = [e.timestamp for e in entries]
    assert stamps == sorted(stamps)
    assert all(before - timedelta(seconds=1) <= s <= datetime.now(UTC) for s in stamps)
    assert {"AppCountLogs", "AppFetchLogs"} <= set(fake.calls())


def test_fetch_honours_since_and_until(client: Any) -> None:
    sb = modal.Sandbox.create("sh", "-c", "echo early; read go; echo late", app=app_for(client), client=client)
    wait_for(lambda: [e.message for e in sb.logs.fetch(since=_since_an_hour())] == ["early\n"], what="the early line")
    cut = datetime.now(UTC)
    wait_for(lambda: datetime.now(UTC) > cut + timedelta(milliseconds=20), what="time to pass the cut")
    sb.stdin.write(b"go\n")
    sb.stdin.drain()
    sb.wait()
    assert [e.message for e in sb.logs.fetch(since=cut)] == ["late\n"]
    assert [e.message for e in sb.logs.fetch(since=_since_an_hour(), until=cut)] == ["early\n"]
    assert [e.message for e in sb.logs.fetch(since=_since_an_hour())] == ["early\n", "late\n"]


def test_fetch_honours_source_and_search_text(client: Any) -> None:
    script = "echo apple; echo banana >&2; echo cherry >&2; echo apricot"
    sb = modal.Sandbox.create("sh", "-c", script, app=app_for(client), client=client)
    sb.wait()
    since = _since_an_hour()
    assert sorted(e.message for e in sb.logs.fetch(since=since, source="stderr")) == ["banana\n", "cherry\n"]
    assert [e.message for e in sb.logs.fetch(since=since, source="stdout")] == ["apple\n", "apricot\n"]
    assert list(sb.logs.fetch(since=since, source="system")) == []
    assert [e.message for e in sb.logs.fetch(since=since, search_text="ap")] == ["apple\n", "apricot\n"]


def test_logs_are_the_sandboxs_own(client: Any) -> None:
    app = app_for(client)
    first = modal.Sandbox.create("sh", "-c", "echo one", app=app, client=client)
    second = modal.Sandbox.create("sh", "-c", "echo two", app=app, client=client)
    first.wait()
    second.wait()
    assert [e.message for e in first.logs.fetch(since=_since_an_hour())] == ["one\n"]
    assert [e.message for e in second.logs.fetch(since=_since_an_hour())] == ["two\n"]
    again = modal.Sandbox.from_id(first.object_id, client=client)
    assert [e.message for e in again.logs.fetch(since=_since_an_hour())] == ["one\n"]


def test_tail_gives_the_newest_entries(client: Any, fake: FakeModal) -> None:
    script = "for i in 1 2 3 4 5; do echo line$i; done"
    sb = modal.Sandbox.create("sh", "-c", script, app=app_for(client), client=client)
    sb.wait()
    wait_for(lambda: len(list(sb.logs.fetch(since=_since_an_hour()))) == 5, what="five lines")
    assert [e.message for e in sb.logs.tail(2)] == ["line4\n", "line5\n"]
    assert [e.message for e in sb.logs.tail(10)] == [f"line{i}\n" for i in range(1, 6)]
    assert "AppFetchLogs" in fake.calls()
