"""Ownership of local instances: each owner (cluster + alias) has its own folder on a shared
state_dir, and sees, adopts and terminates only what is in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, ProvisionRequest
from providers.errors import NotFound
from providers.local import LocalProvider, folder, launch, pids
from providers.owner import Owner
from tests.support.factories import make_pod_spec
from tests.support.local_cleanup import kill_leftovers
from tests.support.polling import wait_for

CLAIM = ClaimName("ns-pod-abcdefghij")
SCRIPT = "echo started; exec sleep 300"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for owner in (tmp_path / "local").glob("*.*"):
        cluster, alias = owner.name.split(".")
        provider = LocalProvider(alias, {"state_dir": str(tmp_path), "grace_period": 1}, owner=Owner(cluster, alias))
        for instance in provider.list():
            provider.terminate(instance.id)
    kill_leftovers(tmp_path)


def local(state: Path, alias: str, cluster: str = "c1") -> LocalProvider:
    return LocalProvider(alias, {"state_dir": str(state), "grace_period": 1}, owner=Owner(cluster, alias))


def running(provider: LocalProvider, instance_id: InstanceId) -> bool:
    instance = provider.get(instance_id)
    return instance is not None and instance.state is InstanceState.RUNNING


def test_an_instance_id_names_its_owner_and_claim_and_parses_back() -> None:
    instance_id = folder.instance_id_for("c1.box", "ns-pod-abcdefghij")
    assert instance_id == "local-c1.box.ns-pod-abcdefghij"
    assert folder.parse_instance_id(instance_id) == ("c1.box", "ns-pod-abcdefghij")
    assert folder.claim_of(instance_id) == "ns-pod-abcdefghij"
    for not_ours in ("local-ns-pod-abcdefghij", "local-c1.box", "local-a.b.c.d", "local-c1..x", "aws-c1.box.x", ""):
        assert folder.parse_instance_id(not_ours) is None


def test_two_aliases_on_one_state_dir_never_see_each_others_instances(state: Path) -> None:
    """list, get, terminate, logs, restart and provision's idempotency see only the owner's folder:
    the same claim provisioned by two aliases (or two clusters) is two instances."""
    box, gpu, other_cluster = local(state, "box"), local(state, "gpu"), local(state, "box", cluster="c2")
    pod = make_pod_spec(args=(SCRIPT,))
    mine = box.provision(pod, ProvisionRequest(CLAIM)).instance_id
    theirs = gpu.provision(pod, ProvisionRequest(CLAIM)).instance_id
    assert mine != theirs and box.provision(pod, ProvisionRequest(CLAIM)).instance_id == mine
    wait_for(lambda: running(box, mine) and running(gpu, theirs))
    assert [i.id for i in box.list()] == [mine] and [i.id for i in gpu.list()] == [theirs]
    assert other_cluster.list() == [] and other_cluster.get(mine) is None
    assert box.get(theirs) is None and gpu.get(mine) is None
    for call in (lambda: box.logs(theirs, LogOptions()), lambda: box.restart(theirs)):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(NotFound):
        box.attach(theirs, stdin=False, tty=False)
    box.terminate(theirs)  # another owner's id is gone: a no-op
    other_cluster.terminate(mine)
    assert running(gpu, theirs) and running(box, mine)
    assert not (gpu.root / CLAIM / "terminate.json").exists() and not (box.root / CLAIM / "terminate.json").exists()
    box.terminate(mine)
    wait_for(lambda: box.get(mine) is None)
    assert running(gpu, theirs)


def test_a_folder_of_the_layout_before_owners_is_neither_listed_nor_terminated_nor_adopted(state: Path) -> None:
    """A `<state_dir>/local/<claim>/` folder (made before owners existed) keeps running untouched."""
    pod = make_pod_spec(args=(SCRIPT,))
    old = launch.create_instance(state / "local", pod, ProvisionRequest(CLAIM), grace_period=1)
    assert old is not None
    launch.start_supervisor(old)
    wait_for(lambda: b"started" in (old / folder.LOG_FILE).read_bytes())
    box = local(state, "box")
    old_id = InstanceId(f"local-{CLAIM}")  # the id such a folder was given
    assert box.list() == [] and box.get(old_id) is None
    box.terminate(old_id)
    adopted = box.provision(pod, ProvisionRequest(CLAIM)).instance_id
    assert adopted != old_id and (box.root / CLAIM).is_dir() and [i.id for i in box.list()] == [adopted]
    box.terminate(adopted)
    wait_for(lambda: box.list() == [])
    assert not (old / "terminate.json").exists() and old.is_dir()
    workload = pids.ProcessIdentity.from_json(folder.read_json(old / folder.RUN_FILE)["workload"])
    assert workload is not None and pids.group_alive(workload)
