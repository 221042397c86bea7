"""Two owners on one Modal app never see, adopt or terminate each other's sandboxes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.base import InstanceState
from providers.modal import status
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for

__all__ = ["fake_modal"]


def test_two_owners_stay_apart(fake_modal: Any, tmp_path: Path) -> None:
    ours = provider_on(fake_modal, tmp_path, cluster="east")
    theirs = provider_on(fake_modal, tmp_path, cluster="west")
    pod = make_pod()
    mine = ours.provision(pod, request_for(pod)).instance_id
    other = theirs.provision(pod, request_for(pod)).instance_id  # the same claim: no adoption across owners
    assert mine != other
    assert [i.id for i in ours.list()] == [mine] and [i.id for i in theirs.list()] == [other]
    assert ours.get(other) is None
    ours.terminate(other)
    record = next(r for r in fake_modal.sandboxes() if r["id"] == other)
    assert record["state"] != "terminated" and record["tags"][status.TAG_OWNER] == "west.modal"
    got = theirs.get(other)
    assert got is not None and got.state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
