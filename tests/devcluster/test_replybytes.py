"""Reply and watch-event bytes (devcluster/replybytes.py): a write's reply is exactly json.dumps of
the reply object, whether it was cut from the watch line of the same change or encoded afresh."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from devcluster import DevCluster, replybytes
from devcluster.api import Api, Info, Reply, Request
from devcluster.watch import Change
from tests.support.factories import make_pod

OBJECTS: list[Any] = [
    {},
    {"a": [1, 2.5, -0.0, 1e300, True, False, None], "b": {"c": ""}},
    {"unicode": "caf\u00e9 \u2603 \U0001f600", "quote": 'say "hi"\\', "ctl": "\n\t\x00"},
    make_pod("p1", labels={"app": "x"}),
]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize("obj", OBJECTS)
def test_encode_event_is_json_dumps_of_the_event_and_gives_the_object_back(obj: Any) -> None:
    for event_type in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        line = replybytes.encode_event(event_type, obj)
        assert line == _dumps({"type": event_type, "object": obj}) + b"\n"
        assert replybytes.object_of_line(event_type, line) == replybytes.encode_object(obj) == _dumps(obj)


def _call(api: Api, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Reply:
    data = b"" if body is None else json.dumps(body).encode()
    reply = api.handle(Request(method, path, [], {"content-type": content_type}, data), Info())
    assert isinstance(reply, Reply)
    return reply


def test_a_write_reply_is_json_dumps_of_its_object_and_shares_the_watch_line(cluster: DevCluster) -> None:
    api = Api(cluster.resources, cluster.registry, server_address="127.0.0.1:0")
    watcher, _, _ = cluster.store.watch("/pods", None, None)
    pods = "/api/v1/namespaces/default/pods"
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    bound = make_pod("p1")
    bound["spec"]["nodeName"] = "n1"  # a bound Pod: its first DELETE marks it, the grace-0 one removes it
    replies = [
        _call(api, "POST", pods, bound),
        _call(api, "PATCH", pods + "/p1/status", status, "application/merge-patch+json"),
        _call(api, "PATCH", pods + "/p1/status", status, "application/merge-patch+json"),  # no change: old object
        _call(api, "DELETE", pods + "/p1"),
        _call(api, "DELETE", pods + "/p1", {"gracePeriodSeconds": 0}),
    ]
    assert [r.code for r in replies] == [201, 200, 200, 200, 200]
    changes = watcher.take(0)
    assert [c.type for c in changes] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    written: list[Change] = [changes[0], changes[1], changes[1], changes[2], changes[3]]
    for reply, change in zip(replies, written, strict=True):
        assert reply.body == _dumps(change.obj)  # encoded afresh here, never through a cache
        line = change.encoded(change.type, replybytes.encode_event)  # made by the reply, now shared
        assert line == _dumps({"type": change.type, "object": change.obj}) + b"\n"
    cluster.store.unwatch(watcher)


def test_a_reply_for_an_object_no_change_of_this_thread_holds_is_encoded_afresh(cluster: DevCluster) -> None:
    written = replybytes.WrittenObjects(cluster.store)
    made: list[dict[str, Any]] = []
    other = threading.Thread(target=lambda: made.append(_create(cluster, make_pod())))
    other.start()
    other.join()
    assert written.encode(made[0]) == _dumps(made[0])  # another thread's write: plain json.dumps
    changed = {**made[0], "metadata": {**made[0]["metadata"], "labels": {"new": "label"}}}
    assert written.encode(changed) == _dumps(changed)
    dry = cluster.resources.create(_pods(cluster), "default", make_pod("p2"), dry_run=True)
    assert written.encode(dry) == _dumps(dry)


def test_each_thread_remembers_a_bounded_number_of_changes(cluster: DevCluster) -> None:
    written = replybytes.WrittenObjects(cluster.store)
    for i in range(replybytes.RECENT + 3):
        cluster.resources.create(_pods(cluster), "default", make_pod(f"p{i}"))
    assert len(written._local.recent) == replybytes.RECENT


def _create(cluster: DevCluster, pod: dict[str, Any]) -> dict[str, Any]:
    return cluster.resources.create(_pods(cluster), "default", pod)


def _pods(cluster: DevCluster) -> Any:
    return cluster.resources.builtin("", "v1", "pods")
