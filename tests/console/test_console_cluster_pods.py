"""The console of a replica shows the Pods and nodes other replicas serve, read from the cluster
(console.clusterpods) over real HTTP from the embedded API server: in the REST API and the
mirror alike, with their phase and instance; a Pod deleted goes; a node that comes to this
replica is listed once; the view keeps one bounded slim row per Pod, never an env value."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console import models, runtime
from console.clusterpods import ClusterPod, ClusterView
from console.mirror import Mirror
from console.observer import ConsoleObserver
from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from providers.fake.server import start_server
from tests.support.factories import make_node, make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.managers import Rig, SharedManager, node_holders, running
from tests.support.rigs.offline import adopt_new_pod, adopt_provisioned, offline_handler

SECRET = "s3cr3t-value-never-shown"
STARTED = "2026-12-05T10:00:00Z"
RUNNING = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "containerStatuses": [
        {"name": "main", "ready": True, "restartCount": 2, "state": {"running": {"startedAt": STARTED}}}
    ],
}


def bound_pod(kube: Kube, name: str, node: str, *, instance: str | None = None, status: Any = None) -> dict[str, Any]:
    """A Pod bound to `node`, as its serving replica writes it: the instance annotations, then
    the status (over the status subresource). An env value rides along, never to be shown."""
    annotations = {names.ENDPOINT_ANNOTATION: f"https://{name}.example:8443", names.CAPACITY_TYPE_ANNOTATION: "Spot"}
    if instance is not None:
        annotations[names.INSTANCE_ID_ANNOTATION] = instance
    env = [{"name": "TOKEN", "value": SECRET}]
    pod = make_pod(name, annotations=annotations, container={"env": env}, nodeName=node)
    created = kube.create(path_for("pods", namespace="default"), pod)
    if status is not None:
        path = path_for("pods", namespace="default", name=name, subresource="status")
        created = kube.patch(path, {"status": status})
    return created


def remote_node(kube: Kube, provider: str) -> None:
    """The virtual Node another replica registered and keeps Ready."""
    now = "2026-12-05T10:00:00Z"
    ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now}
    reachable = {"type": names.CONDITION_PROVIDER_REACHABLE, "status": "True", "lastTransitionTime": now}
    node = make_node(
        names.node_name(provider),
        labels={names.PROVIDER_KEY: provider},
        status={"conditions": [ready, reachable], "capacity": {"pods": "110", "nvidia.com/gpu": "8"}},
    )
    kube.create(path_for("nodes"), node)


@pytest.fixture
def view(cluster: DevCluster) -> Iterator[Callable[..., ClusterView]]:
    made: list[ClusterView] = []

    def build(providers: list[str], *, here: list[str], **options: Any) -> ClusterView:
        built = ClusterView(kube_for(cluster), providers, **options)
        made.append(built)
        built.serve_here(names.node_name(p) for p in here)
        wait_for(built.synced, what="the view's first lists")
        return built

    yield build
    for each in made:
        each.stop()


@pytest.fixture
def reader(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("reader", password="pw-reader-1234"))
    return client


def api(client: Client, kind: str) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/api/{kind}/?page_size=500")
    assert answer.status_code == 200, answer.content
    return {row["name"]: row for row in answer.json()["results"]}


def test_pods_of_a_node_another_replica_serves_show_in_the_api_and_the_mirror(
    kube: Kube,
    view: Callable[..., ClusterView],
    reader: Client,
    fake_provider: Callable[..., Any],
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
) -> None:
    """Provider `a` is served here (its Handler), `b` by another replica: b's Pods come from the
    cluster with the phase, status, instance and annotations its replica wrote, b's node from
    its Node object; a Pod bound to a node served here is never read from the cluster; a Pod
    deleted reads Terminating, and once gone leaves the API and, at the next sync, the mirror;
    the dashboard counts b's Pods on b's tile, marked as served by another replica."""
    handler = offline_handler(fake_provider("a"))
    adopt_new_pod(handler, "here-0")
    remote_node(kube, "b")
    bound_pod(kube, "b-run", "nebula-b", instance="i-b-run", status=RUNNING)
    bound_pod(kube, "b-new", "nebula-b")
    bound_pod(kube, "a-copy", "nebula-a", instance="i-a-copy", status=RUNNING)
    cluster_view = view(["a", "b"], here=["a"])
    installed_runtime(handlers=[handler])
    runtime.install(handlers=[handler], cluster=cluster_view)
    wait_for(lambda: len(cluster_view.pods()) == 2, what="b's two Pods in the view")

    pods = api(reader, "pods")
    assert set(pods) == {"here-0", "b-run", "b-new"}
    running = pods["b-run"]
    assert (running["provider"], running["node"], running["instance_id"]) == ("b", "nebula-b", "i-b-run")
    kubectl = (running["phase"], running["status"], running["ready"], running["restarts"])
    assert kubectl == ("Running", "Running", "1/1", 2)
    assert (running["capacity_type"], running["endpoint"]) == ("Spot", "https://b-run.example:8443")
    assert running["served_here"] is False and pods["here-0"]["served_here"] is True
    assert running["claim"] and running["created_at"]
    assert (pods["b-new"]["phase"], pods["b-new"]["instance_id"]) == ("Pending", None)
    nodes = api(reader, "nodes")
    assert set(nodes) == {"nebula-a", "nebula-b"}
    assert (nodes["nebula-b"]["served_here"], nodes["nebula-b"]["ready"], nodes["nebula-b"]["pods"]) == (False, True, 2)
    assert nodes["nebula-b"]["capacity"] == {"pods": "110", "nvidia.com/gpu": "8"}
    assert nodes["nebula-b"]["poll_interval"] is None and nodes["nebula-a"]["served_here"] is True

    mirror = Mirror(runtime.current, observer=lambda: observer)
    mirror.sync_once()
    mirrored = models.TrackedPod.objects.get(name="b-run")
    assert (mirrored.phase, mirrored.instance_id, mirrored.served_here) == ("Running", "i-b-run", False)
    assert models.VirtualNode.objects.get(name="nebula-b").served_here is False
    staff = Client()
    staff.force_login(User.objects.create_user("staff", password="pw-staff-12345", is_staff=True))
    page = staff.get("/").content.decode()
    assert "3 pods" in page and 'data-node="nebula-b"' in page  # the dashboard counts b's Pods
    tile = page[page.index('data-node="nebula-b"') :]
    assert "by another replica" in tile[: tile.index("</section>")]

    doomed = path_for("pods", namespace="default", name="b-new")
    kube.delete(doomed)  # graceful: Terminating until its kubelet (b's replica) confirms
    wait_for(lambda: api(reader, "pods")["b-new"]["status"] == "Terminating", what="b-new read Terminating")
    kube.delete(doomed, grace_seconds=0)  # what b's replica does once the instance is gone
    wait_for(lambda: len(cluster_view.pods()) == 1, what="the deleted Pod gone from the view")
    assert set(api(reader, "pods")) == {"here-0", "b-run"}
    mirror.sync_once()
    assert not models.TrackedPod.objects.filter(name="b-new").exists()
    assert api(reader, "nodes")["nebula-b"]["pods"] == 1


def test_the_mirror_row_and_the_api_row_of_a_remote_pod_agree(
    kube: Kube,
    view: Callable[..., ClusterView],
    reader: Client,
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
) -> None:
    """As test_console_units.py::test_the_mirror_row_and_the_api_row_of_a_pod_agree for a served
    Pod: every field the API returns for a Pod read from the cluster reads the same in the
    mirror (a NOT NULL text column holds "" for the API's null), prices and times included."""
    priced = {names.HOURLY_PRICE_ANNOTATION: "2.5", names.POOL_ANNOTATION: "train", names.REGION_ANNOTATION: "eu-1"}
    pod = make_pod("b-0", annotations={names.INSTANCE_ID_ANNOTATION: "i-b-0", **priced}, nodeName="nebula-b")
    kube.create(path_for("pods", namespace="default"), pod)
    kube.patch(path_for("pods", namespace="default", name="b-0", subresource="status"), {"status": RUNNING})
    cluster_view = view(["b"], here=[])
    wait_for(lambda: [p.phase for p in cluster_view.pods()] == ["Running"], what="b-0 Running in the view")
    installed_runtime(handlers=[])
    runtime.install(cluster=cluster_view)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    (row,) = api(reader, "pods").values()
    stored = models.TrackedPod.objects.values().get(uid=row["uid"])
    for name, value in row.items():
        kept = stored[name]
        if isinstance(kept, datetime):
            kept, value = kept.isoformat().replace("+00:00", "Z"), value and value.replace("+00:00", "Z")
        assert kept == ("" if value is None and isinstance(kept, str) else value), name
    assert (row["hourly_price"], row["pool"], row["region"], row["provisioned_at"]) == (2.5, "train", "eu-1", None)


def test_a_provider_moved_to_this_replica_is_listed_once(
    kube: Kube,
    view: Callable[..., ClusterView],
    reader: Client,
    fake_provider: Callable[..., Any],
    installed_runtime: Callable[..., Any],
) -> None:
    """While b's Handler already runs here and the view still watches b, the Handler's row
    wins (one row per Pod, one per node); once the view is told, b is no longer watched."""
    remote_node(kube, "b")
    pod = bound_pod(kube, "b-0", "nebula-b", instance="i-b-0", status=RUNNING)
    cluster_view = view(["a", "b"], here=["a"])
    wait_for(lambda: len(cluster_view.pods()) == 1, what="b's Pod in the view")
    moved = offline_handler(fake_provider("b"))
    adopt_provisioned(moved, pod)  # the same Pod (same uid), now tracked here
    installed_runtime(handlers=[offline_handler(fake_provider("a")), moved])
    runtime.install(handlers=[offline_handler(fake_provider("a")), moved], cluster=cluster_view)

    (row,) = [r for r in api(reader, "pods").values()]
    assert (row["name"], row["served_here"]) == ("b-0", True)
    nodes = api(reader, "nodes")
    assert nodes["nebula-b"]["served_here"] is True and len(nodes) == 2

    cluster_view.serve_here(["nebula-a", "nebula-b"])
    assert cluster_view.remote() == {} and cluster_view.pods() == []


def test_the_view_keeps_a_bounded_slim_row_per_pod(kube: Kube, view: Callable[..., ClusterView]) -> None:
    """Past `max_pods` a node's Pods are counted, not kept (from the list and from the watch);
    a kept Pod deleted makes room for one counted; what is kept is a ClusterPod holding no env
    value; a stopped view holds nothing."""
    for index in range(4):
        bound_pod(kube, f"b-{index}", "nebula-b", status=RUNNING)
    cluster_view = view(["b"], here=[], max_pods=3)
    assert (len(cluster_view.pods()), cluster_view.unlisted()) == (3, 1)
    bound_pod(kube, "b-4", "nebula-b")
    wait_for(lambda: cluster_view.unlisted() == 2, what="a Pod past the bound counted from the watch")
    assert len(cluster_view.pods()) == 3

    kept = cluster_view.pods()[0].name
    kube.delete(path_for("pods", namespace="default", name=kept), grace_seconds=0)
    wait_for(
        lambda: cluster_view.unlisted() == 1 and kept not in {p.name for p in cluster_view.pods()},
        what="the freed place filled by a re-list",
    )
    assert len(cluster_view.pods()) == 3
    assert all(type(p) is ClusterPod and SECRET not in repr(p) for p in cluster_view.pods())
    assert not hasattr(cluster_view.pods()[0], "__dict__")  # slots: no per-Pod dict

    cluster_view.stop()
    assert cluster_view.pods() == [] and cluster_view.unlisted() == 0
    cluster_view.serve_here([])  # a stopped view starts nothing again
    assert cluster_view.remote() == {}


def test_a_pod_recreated_under_its_name_shows_its_new_uid(kube: Kube, view: Callable[..., ClusterView]) -> None:
    """The view is keyed by namespace/name as the API is: a delete and a create of the same
    name leave one row, the new Pod's."""
    first = bound_pod(kube, "again", "nebula-b")
    cluster_view = view(["b"], here=[])
    wait_for(lambda: [p.uid for p in cluster_view.pods()] == [first["metadata"]["uid"]], what="the first Pod")
    kube.delete(path_for("pods", namespace="default", name="again"), grace_seconds=0)
    wait_for(lambda: cluster_view.pods() == [], what="the delete", ignoring=(NotFoundError,))
    second = bound_pod(kube, "again", "nebula-b", instance=f"i-{uuid.uuid4().hex[:6]}")
    wait_for(lambda: [p.uid for p in cluster_view.pods()] == [second["metadata"]["uid"]], what="the new Pod")


@pytest.fixture
def two_replicas(cluster: DevCluster, tmp_path: Path) -> Iterator[Rig]:
    """Two `runvnode --share-providers` processes, one provider each, on one fake cloud."""
    assert cluster.kubeconfig_path is not None
    cloud = start_server()
    rig = Rig(cluster.kubeconfig_path, cloud, tmp_path, ["p0", "p1"], lease=4, poll=0.5)
    try:
        yield rig
    finally:
        rig.close()
        cloud.close()


def mirrored(manager: SharedManager, table: str, columns: str) -> list[tuple[Any, ...]]:
    """Rows of a replica's own mirror (its SQLite file), as its dashboard reads them."""
    with contextlib.closing(sqlite3.connect(manager.log.with_suffix(".sqlite3"), timeout=10)) as db:
        try:
            return list(db.execute(f"SELECT {columns} FROM console_{table} ORDER BY name"))  # noqa: S608 (ours)
        except sqlite3.OperationalError:
            return []  # not migrated yet


@pytest.mark.slow
def test_the_leaders_console_lists_the_pods_of_both_replicas(kube: Kube, two_replicas: Rig) -> None:
    """Real processes: the leader's console (its mirror, which its dashboard reads) lists the Pod
    it serves and the one the other replica serves, each Running with its instance, and both
    virtual nodes, each marked by whether the leader serves it."""
    managers = [two_replicas.manager(name) for name in ("a", "b")]
    for manager in managers:
        wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
    holders = wait_for(
        lambda: (h := node_holders(kube, ["p0", "p1"])) and len(set(h.values()) - {""}) == 2 and h,
        60,
        0.2,
        what="one provider each",
    )
    for alias in ("p0", "p1"):
        kube.create(path_for("pods", namespace="default"), make_pod(f"job-{alias}", alias))
    wait_for(lambda: running(kube, {"job-p0", "job-p1"}), 90, 0.2, what="both Pods Running")
    lead = wait_for(lambda: next((m for m in managers if m.identity == leader_of(kube)), None), 30, 0.2)
    served = {f"job-{alias}": int(holder == lead.identity) for alias, holder in holders.items()}
    wanted = [(name, served[name], "Running") for name in sorted(served)]
    wait_for(
        lambda: [(n, s, p) for n, s, p, i in mirrored(lead, "trackedpod", "name, served_here, phase, instance_id") if i]
        == wanted,
        60,
        0.2,
        what="the leader's mirror lists both Pods Running with their instances",
    )
    nodes = {name: here for name, here in mirrored(lead, "virtualnode", "name, served_here")}
    assert nodes == {names.node_name(alias): int(holder == lead.identity) for alias, holder in holders.items()}


def leader_of(kube: Kube) -> str:
    lease = kube.get(path_for("leases", namespace="default", name="nebula-manager", group="coordination.k8s.io"))
    return str(lease["spec"].get("holderIdentity") or "")
