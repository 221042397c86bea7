"""Ownership on one fake cloud, in-process and over HTTP alike: a provider sees, adopts,
terminates, reads and restarts only its own owner's instances; records without an owner
(an old state file) are no one's; control calls reach any instance."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from providers import errors
from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.cloud import FakeCloud
from providers.fake.registry import forget
from providers.fake.server import FakeCloudServer, start_server
from providers.owner import Owner
from tests.support.factories import make_pod_spec

Make = Callable[[Owner], FakeProvider]


@pytest.fixture(params=["in-process", "http"])
def on_one_cloud(request: pytest.FixtureRequest) -> Iterator[tuple[Make, FakeCloud]]:
    """A factory of providers on one fake cloud, and that cloud (for control calls)."""
    if request.param == "http":
        server = start_server()
        yield (lambda owner: FakeProvider(owner.alias, {"url": server.url}, owner=owner)), server.cloud
        server.close()
    else:
        name = f"owners-{uuid.uuid4().hex}"
        make: Make = lambda owner: FakeProvider(owner.alias, {"cloud": name}, owner=owner)  # noqa: E731
        yield make, make(Owner.standalone("control")).cloud
        forget(name)


def provision(provider: FakeProvider, claim: str) -> InstanceId:
    return provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName(claim))).instance_id


def test_two_clusters_with_the_same_alias_never_see_each_others_instances(
    on_one_cloud: tuple[Make, FakeCloud],
) -> None:
    make, cloud = on_one_cloud
    first, second = make(Owner("cluster-a", "gpu")), make(Owner("cluster-b", "gpu"))
    mine = provision(first, "same-claim")
    theirs = provision(second, "same-claim")  # the claim is per owner: no adoption across clusters
    assert mine != theirs
    assert [i.id for i in first.list()] == [mine] and [i.id for i in second.list()] == [theirs]
    assert first.get(theirs) is None and second.get(mine) is None
    first.terminate(theirs)  # taken as gone: nothing happens to it
    instance = second.get(theirs)
    assert instance is not None and instance.state is InstanceState.RUNNING
    cloud.exit(theirs, code=2)  # control calls reach any owner's instance
    for read in (lambda: first.logs(theirs, LogOptions()), lambda: first.restart(theirs)):
        with pytest.raises(errors.NotFound):
            read()
    second.restart(theirs)
    assert make(Owner("cluster-a", "gpu")).list() == first.list()  # a new object of the same owner adopts
    assert provision(make(Owner("cluster-a", "gpu")), "same-claim") == mine


def test_another_alias_of_the_same_cluster_is_another_owner(on_one_cloud: tuple[Make, FakeCloud]) -> None:
    make, cloud = on_one_cloud
    gpu, cpu = make(Owner("c1", "gpu")), make(Owner("c1", "cpu"))
    instance_id = provision(gpu, "c")
    assert cpu.list() == [] and cpu.get(instance_id) is None
    assert [r["owner"] for r in cloud.instances()] == ["c1.gpu"]


def test_exec_and_attach_reach_only_the_owners_instances() -> None:
    name = f"owners-{uuid.uuid4().hex}"
    try:
        mine = FakeProvider("gpu", {"cloud": name}, owner=Owner("a", "gpu"))
        other = FakeProvider("gpu", {"cloud": name}, owner=Owner("b", "gpu"))
        instance_id = provision(mine, "c")
        for call in (
            lambda: other.exec(instance_id, ["true"], tty=False, stdin=False),
            lambda: other.attach(instance_id, stdin=False, tty=False),
        ):
            with pytest.raises(errors.NotFound):
                call()
        proc = mine.exec(instance_id, ["true"], tty=False, stdin=False)
        assert proc.wait(5) == 0
        proc.close()
    finally:
        forget(name)


def test_a_provider_call_naming_no_owner_is_refused_over_http() -> None:
    server = start_server()
    try:
        host, port = server.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/v1/instances")
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        assert response.status == 400 and answer["error"]["type"] == "InvalidRequest"
        with pytest.raises(errors.InvalidRequest, match="owner"):
            server.cloud.list(owner="")
    finally:
        server.close()


def old_state(path: Path) -> None:
    """A state file as the fake wrote it before owners existed (version 1)."""
    record = {
        "id": "fake-7",
        "claim": "old-claim",
        "state": "running",
        "created_at": 1_700_000_000.0,
        "ready_at": 1_700_000_000.0,
        "accelerator": None,
        "gpu_count": 0,
        "tier": "OnDemand",
        "region": "us-east-1",
        "image": "busybox",
        "started_at": 1_700_000_000.0,
        "stopped_at": None,
        "gone_at": None,
        "exit_code": None,
        "message": "running",
    }
    path.write_text(json.dumps({"version": 1, "counter": 7, "fault_counter": 0, "instances": [record], "faults": []}))


def test_records_of_an_old_state_file_have_no_owner_and_no_provider_ever_sees_them(tmp_path: Path) -> None:
    state = tmp_path / "fake.json"
    old_state(state)
    server: FakeCloudServer = start_server(state_path=state)
    try:
        provider = FakeProvider("fake", {"url": server.url})
        old = InstanceId("fake-7")
        assert provider.list() == [] and provider.get(old) is None
        provider.terminate(old)
        with pytest.raises(errors.NotFound):
            provider.logs(old, LogOptions())
        adopted = provision(provider, "old-claim")
        assert adopted == "fake-8"  # a new instance, not the unowned one
        server.cloud.exit("fake-7", code=0)  # control calls still reach it
        stored = {r["id"]: (r["state"], r["owner"]) for r in server.cloud.instances()}
        assert stored == {"fake-7": ("succeeded", ""), "fake-8": ("running", "standalone.fake")}
        assert json.loads(state.read_text())["version"] == 3
    finally:
        server.close()
