"""Watch semantics over real HTTPS: resume from a resourceVersion, synthetic ADDED, selector
transitions, bookmarks, watch-list, timeouts, 410 after compaction, and fan-out at scale."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from devcluster import DevCluster
from devcluster.store import Store
from devcluster.watch import Change
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod
from tests.support.polling import wait_for

PODS = "/api/v1/namespaces/default/pods"


class Stream:
    """One open watch read line by line on its own connection."""

    def __init__(self, raw: Raw, path: str, *, headers: dict[str, str] | None = None) -> None:
        self.conn = raw.connection(timeout=30)
        self.conn.request("GET", path, headers=headers or {})
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Transfer-Encoding") == "chunked"
        self._lines: list[bytes] = []
        self._partial = b""

    def _line(self) -> bytes:
        """The next NDJSON line; read1 takes whole chunks (readline on a chunked body is slow)."""
        while not self._lines:
            data = self.response.read1(65536)
            if not data:
                return b""
            *complete, self._partial = (self._partial + data).split(b"\n")
            self._lines.extend(complete)
        return self._lines.pop(0)

    def next(self) -> dict[str, Any]:
        line = self._line()
        assert line, "the watch ended"
        event: dict[str, Any] = json.loads(line)
        return event

    def take(self, count: int) -> list[tuple[str, str]]:
        events = [self.next() for _ in range(count)]
        return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]

    def ended(self) -> bool:
        return self._line() == b""

    def close(self) -> None:
        self.conn.close()


def _rv(raw: Raw) -> str:
    return str(raw.json("GET", PODS)[1]["metadata"]["resourceVersion"])


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return make_pod(name, metadata={"labels": labels}, spec={"schedulerName": "none"})


def test_watch_from_a_resource_version_sees_every_later_change_in_order(raw: Raw) -> None:
    raw.json("POST", PODS, _pod("before"))
    start = _rv(raw)
    raw.json("POST", PODS, _pod("a"))
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion={start}")
    try:
        raw.json(
            "PATCH",
            f"{PODS}/a",
            {"metadata": {"labels": {"x": "1"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        raw.json("DELETE", f"{PODS}/a")
        assert stream.take(3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    finally:
        stream.close()


def test_watch_from_zero_starts_with_synthetic_added_for_the_current_state(raw: Raw) -> None:
    raw.json("POST", PODS, _pod("a"))
    raw.json("POST", PODS, _pod("b"))
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion=0&fieldSelector=metadata.name%3Db")
    try:
        assert stream.take(1) == [("ADDED", "b")]
        raw.json("DELETE", f"{PODS}/a")
        raw.json("DELETE", f"{PODS}/b")
        assert stream.take(1) == [("DELETED", "b")]
    finally:
        stream.close()


def test_an_object_leaving_or_entering_the_selector_is_sent_as_deleted_or_added(raw: Raw) -> None:
    merge = {"Content-Type": "application/merge-patch+json"}
    raw.json("POST", PODS, _pod("a", app="web"))
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion={_rv(raw)}&labelSelector=app%3Dweb")
    try:
        raw.json("PATCH", f"{PODS}/a", {"metadata": {"labels": {"app": "db"}}}, headers=merge)
        raw.json("PATCH", f"{PODS}/a", {"metadata": {"labels": {"tier": "x"}}}, headers=merge)
        raw.json("PATCH", f"{PODS}/a", {"metadata": {"labels": {"app": "web"}}}, headers=merge)
        raw.json("PATCH", f"{PODS}/a", {"metadata": {"labels": {"tier": "y"}}}, headers=merge)
        assert stream.take(3) == [("DELETED", "a"), ("ADDED", "a"), ("MODIFIED", "a")]
    finally:
        stream.close()


def test_timeout_seconds_ends_the_stream_cleanly(raw: Raw) -> None:
    stream = Stream(raw, f"{PODS}?watch=true&timeoutSeconds=1")
    try:
        assert stream.ended()
    finally:
        stream.close()


def test_bookmarks_carry_only_kind_api_version_and_resource_version(raw: Raw) -> None:
    raw.json("POST", PODS, _pod("a"))
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion={_rv(raw)}&allowWatchBookmarks=true")
    try:
        event = stream.next()
        assert event["type"] == "BOOKMARK"
        assert event["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": _rv(raw)}}
    finally:
        stream.close()


def test_watch_list_sends_added_then_the_initial_events_end_bookmark_then_live_events(raw: Raw) -> None:
    raw.json("POST", PODS, _pod("a"))
    raw.json("POST", PODS, _pod("b"))
    query = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    stream = Stream(raw, f"{PODS}?{query}&fieldSelector=metadata.name%3Da")
    try:
        assert stream.take(1) == [("ADDED", "a")]
        end = stream.next()
        assert end["type"] == "BOOKMARK"
        assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        raw.json("DELETE", f"{PODS}/a")
        while (event := stream.next())["type"] == "BOOKMARK":
            pass
        assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "a")
    finally:
        stream.close()


def test_a_table_watch_sends_one_row_tables(raw: Raw) -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion={_rv(raw)}", headers={"Accept": accept})
    try:
        raw.json("POST", PODS, _pod("a"))
        event = stream.next()
        assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
        assert [row["cells"][0] for row in event["object"]["rows"]] == ["a"]
    finally:
        stream.close()


def test_a_watch_from_a_compacted_resource_version_gets_410_expired(cluster: DevCluster, raw: Raw) -> None:
    start = _rv(raw)
    raw.json("POST", PODS, _pod("a"))
    cluster.compact()
    stream = Stream(raw, f"{PODS}?watch=true&resourceVersion={start}")
    try:
        event = stream.next()
        assert event["type"] == "ERROR"
        assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
        assert stream.ended()
    finally:
        stream.close()


def test_the_official_clients_watch_survives_compaction_by_relisting(cluster: DevCluster, core: Any) -> None:
    """The loop a client user writes: list, watch from the list's RV, re-list on 410."""
    listed = core.list_namespaced_pod("default")
    stale_rv = listed.metadata.resource_version
    core.create_namespaced_pod("default", _pod("a"))
    cluster.compact()
    seen: list[tuple[str, str]] = []
    relists = 0
    rv = stale_rv
    deadline = time.monotonic() + 30
    while not any(name == "b" for _, name in seen) and time.monotonic() < deadline:
        try:
            for event in watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2
            ):
                seen.append((event["type"], event["object"].metadata.name))
                rv = event["object"].metadata.resource_version
                if event["object"].metadata.name == "a" and not any(n == "b" for _, n in seen):
                    core.create_namespaced_pod("default", _pod("b"))
        except ApiException as err:
            assert err.status == 410
            relists += 1
            fresh = core.list_namespaced_pod("default")
            seen.extend(("LISTED", p.metadata.name) for p in fresh.items)
            rv = fresh.metadata.resource_version
            if len(fresh.items) == 1:
                core.create_namespaced_pod("default", _pod("b"))
    assert relists == 1
    assert ("LISTED", "a") in seen and ("ADDED", "b") in seen


def test_a_slow_watcher_is_expired_instead_of_growing_memory() -> None:
    store = Store(history=100, watcher_queue=5)
    watcher, _, _ = store.watch("/pods", None, 0)
    for i in range(10):
        store.put("/pods", {"metadata": {"name": f"p{i}", "namespace": "default"}})
    assert watcher.expired and watcher.take(0) == []


def test_stop_ends_open_watches(tmp_path: Any) -> None:
    cluster = DevCluster()
    cluster.start()
    raw = Raw(cluster)
    stream = Stream(raw, f"{PODS}?watch=true")
    try:
        cluster.stop()
        with pytest.raises((http.client.IncompleteRead, OSError, AssertionError)):
            while True:
                stream.next()
    finally:
        stream.close()
        cluster.stop()


def test_the_store_history_records_each_change_once_with_increasing_versions(cluster: DevCluster, raw: Raw) -> None:
    raw.json("POST", PODS, _pod("a"))
    raw.json("DELETE", f"{PODS}/a")
    changes = [c for c in cluster.store.history() if c.storage_key == "/pods"]
    assert [(c.type, c.name) for c in changes] == [("ADDED", "a"), ("DELETED", "a")]
    assert isinstance(changes[0], Change) and changes[0].rv < changes[1].rv
    assert changes[1].obj["metadata"]["resourceVersion"] == str(changes[1].rv)


def test_a_watch_whose_client_left_is_closed_and_unregistered(cluster: DevCluster, raw: Raw) -> None:
    stream = Stream(raw, f"{PODS}?watch=true")
    wait_for(lambda: cluster.store.watcher_count == 1, what="the watch to register")
    stream.close()
    wait_for(lambda: cluster.store.watcher_count == 0, what="the watch to be dropped")


def test_a_watcher_that_reads_late_neither_blocks_writers_nor_loses_events(cluster: DevCluster, raw: Raw) -> None:
    stuck = Stream(raw, f"{PODS}?watch=true&resourceVersion={_rv(raw)}")
    try:
        big = {"metadata": {"annotations": {"pad": "x" * 40000}}}
        merge = {"Content-Type": "application/merge-patch+json"}
        raw.json("POST", PODS, _pod("a"))
        for _ in range(100):  # about 4 MB of events, far beyond the socket buffers
            status, _ = raw.json("PATCH", f"{PODS}/a", big, headers=merge)
            assert status == 200
            big["metadata"]["annotations"]["pad"] += "y"
        assert raw.request("GET", "/healthz")[0] == 200
        events = [stuck.next() for _ in range(101)]
        assert [e["type"] for e in events] == ["ADDED"] + ["MODIFIED"] * 100
        assert events[-1]["object"]["metadata"]["annotations"]["pad"].endswith("y" * 99)
    finally:
        stuck.close()
