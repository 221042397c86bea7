"""I6 in the virtual kubelet: memory is the truth. A Runner started on an empty memory
rebuilds its tracked set from the cluster (the Pods on its node) and one provider.list():
it adopts every instance, provisions none again, and creates or deletes no Pod."""

from __future__ import annotations

from collections.abc import Callable

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner


def test_I6_a_restarted_runner_rebuilds_the_tracked_set_from_the_cluster_and_one_list(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    first = start_runner(provider)
    pod_names = [f"kept-{i}" for i in range(4)]
    for name in pod_names:
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_for(lambda: all(phase_of(kube, n) == "Running" for n in pod_names))
    before = {n: (get_pod(kube, n) or {})["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] for n in pod_names}
    assert first.stop(timeout=5) == []
    provisions = len(provider.cloud.call_log("provision"))
    cluster.request_log.clear()

    second = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))  # a fresh memory
    wait_for(lambda: all(second.handler.tracks("default", n) for n in pod_names))
    tracked = {n: second.handler.tracked(f"default/{n}") for n in pod_names}
    assert {n: e.instance_id for n, e in tracked.items() if e is not None} == before
    assert len(provider.cloud.call_log("provision")) == provisions == len(pod_names)
    assert sorted(i.id for i in provider.list()) == sorted(before.values())
    assert all(phase_of(kube, n) == "Running" for n in pod_names)
    pod_writes = {r.verb for r in cluster.request_log.snapshot() if r.resource == "pods"} - {"get", "list", "watch"}
    assert pod_writes <= {"patch"}  # metadata and status only: no Pod is created or deleted
