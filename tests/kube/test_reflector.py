"""The Reflector keeps its cache equal to the server's set of matching objects, against the
embedded API server: the first list, then every add, update and delete the watch brings, and a
re-list after 410 Gone that reports what changed while no watch ran."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import DevCluster
from kube.client import GoneError, Kube, path_for
from kube.reflector import Reflector
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for

CONFIGMAPS = path_for("configmaps", namespace="default")


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"t": "r"}}, "data": data}


class Heard:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str | None]] = []  # key, data["v"] or None for a delete
        self.lock = threading.Lock()

    def __call__(self, key: str, obj: dict[str, Any] | None) -> None:
        with self.lock:
            self.changes.append((key, None if obj is None else (obj.get("data") or {}).get("v")))

    def seen(self) -> list[tuple[str, str | None]]:
        with self.lock:
            return list(self.changes)


@contextlib.contextmanager
def _started(reflector: Reflector) -> Iterator[Reflector]:
    reflector.start()
    try:
        assert reflector.synced.wait(10)
        yield reflector
    finally:
        reflector.stop()


def test_the_first_list_then_the_watch_keep_the_cache_equal_to_the_server(kube: Kube) -> None:
    kube.create(CONFIGMAPS, _configmap("before", v="1"))
    kube.create(CONFIGMAPS, {**_configmap("other", v="x"), "metadata": {"name": "other"}})  # no label
    heard = Heard()
    with _started(Reflector(kube, CONFIGMAPS, on_change=heard, label_selector="t=r")) as reflector:
        assert set(reflector.cache) == {"default/before"}
        kube.create(CONFIGMAPS, _configmap("after", v="2"))
        kube.patch(path_for("configmaps", namespace="default", name="before"), {"data": {"v": "3"}})
        kube.delete(path_for("configmaps", namespace="default", name="after"))
        wait_for(lambda: len(heard.seen()) == 4, what="the list and three watch events")
        assert heard.seen() == [
            ("default/before", "1"),
            ("default/after", "2"),
            ("default/before", "3"),
            ("default/after", None),
        ]
        assert {k: v["data"]["v"] for k, v in reflector.cache.items()} == {"default/before": "3"}
        assert [o["metadata"]["name"] for o in reflector.snapshot()] == ["before"]


class GoneOnce(Kube):
    """The real client, but its first watch answers 410 after `meanwhile` changed the server:
    what a real API server does when a watch resumes from a compacted resourceVersion."""

    def __init__(self, base: Kube, meanwhile: Any) -> None:
        self.__dict__.update(base.__dict__)
        self._meanwhile = meanwhile
        self.watches = 0

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.watches += 1
        if self.watches == 1:
            self._meanwhile()
            raise GoneError(410, "Expired", "too old resource version")
        return super().watch(*args, **kwargs)


def test_a_relist_after_410_reports_the_deletes_and_changes_it_missed(cluster: DevCluster, kube: Kube) -> None:
    kube.create(CONFIGMAPS, _configmap("stays", v="1"))
    kube.create(CONFIGMAPS, _configmap("goes", v="1"))

    def meanwhile() -> None:
        kube.delete(path_for("configmaps", namespace="default", name="goes"))
        kube.patch(path_for("configmaps", namespace="default", name="stays"), {"data": {"v": "2"}})
        kube.create(CONFIGMAPS, _configmap("new", v="1"))

    heard = Heard()
    client = GoneOnce(kube_for(cluster), meanwhile)
    with _started(Reflector(client, CONFIGMAPS, on_change=heard, label_selector="t=r")) as reflector:
        wait_for(lambda: client.watches >= 2, what="a second watch after the re-list")
        after_first_list = heard.seen()[2:]
        assert sorted(after_first_list, key=str) == sorted(
            [("default/goes", None), ("default/stays", "2"), ("default/new", "1")], key=str
        )
        assert {k: v["data"]["v"] for k, v in reflector.cache.items()} == {"default/stays": "2", "default/new": "1"}


MANAGED = [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]


def test_the_cache_keeps_no_managed_fields(kube: Kube) -> None:
    """Invariant: no object in a Reflector's cache (or handed to `on_change`) carries
    `metadata.managedFields`, from the first list or from the watch; the rest is kept."""
    listed = _configmap("listed", v="1")
    listed["metadata"]["managedFields"] = MANAGED
    kube.create(CONFIGMAPS, listed)
    path = path_for("configmaps", namespace="default", name="listed")
    if "managedFields" not in (kube.get(path).get("metadata") or {}):
        pytest.skip("this API server does not keep managedFields")
    handed: list[dict[str, Any]] = []
    reflector = Reflector(kube, CONFIGMAPS, on_change=lambda _k, o: handed.append(o or {}), label_selector="t=r")
    with _started(reflector):
        watched = _configmap("watched", v="2")
        watched["metadata"]["managedFields"] = MANAGED
        kube.create(CONFIGMAPS, watched)
        wait_for(lambda: "default/watched" in reflector.cache, what="the watched ConfigMap in the cache")
        assert sorted(reflector.cache) == ["default/listed", "default/watched"]
        for obj in [*reflector.snapshot(), *handed]:
            assert "managedFields" not in obj["metadata"]
            assert obj["metadata"]["labels"] == {"t": "r"}
        data = {k: v["data"]["v"] for k, v in reflector.cache.items()}
        assert data == {"default/listed": "1", "default/watched": "2"}
