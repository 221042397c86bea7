"""devcluster.store.Store's index of owned objects (`list_owned`), which the Job and apps
controllers read each pass instead of every Pod: it follows each write and delete."""

from __future__ import annotations

from typing import Any

from devcluster.store import Store


def pod(name: str, *owners: str) -> dict[str, Any]:
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": o, "uid": o, "controller": True} for o in owners]
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if refs:
        meta["ownerReferences"] = refs
    return {"metadata": meta}


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def test_list_owned_holds_exactly_the_objects_that_name_an_owner_as_they_are_written_and_deleted() -> None:
    store = Store()
    for index in range(1000):
        store.put("/pods", pod(f"free-{index:04}"))  # a bench's Pods: no owner, never read
    store.put("/pods", pod("b-owned", "job-1"))
    store.put("/pods", pod("a-owned", "job-2"))
    store.put("/jobs", pod("job", "cron"))  # another storage key's objects are not listed
    assert names(store.list_owned("/pods")) == ["a-owned", "b-owned"]
    store.put("/pods", pod("a-owned"))  # its owner reference removed
    store.put("/pods", pod("free-0001", "job-1"))  # one given an owner
    assert names(store.list_owned("/pods")) == ["b-owned", "free-0001"]
    store.remove("/pods", "default", "b-owned")
    assert names(store.list_owned("/pods")) == ["free-0001"]
    assert names(store.list_owned("/secrets")) == []
