"""The RBAC proof: the manager's own API calls, recorded, against the rendered roles.

`manage.py runvnode` runs as a child process (production settings: leader election on, the
providers shared out; the fake cloud over HTTP) against the embedded API server, through a
scenario that reaches every path the process has: the rendered webhook gating an opted-in Pod
that placement places (NodePool status), Pods with env from Secrets and ConfigMaps, Pods
waiting for a missing Secret or ConfigMap, a REST API read with a ServiceAccount's token bound
to the rendered `nebula-console-viewer` (TokenReview, SubjectAccessReview), a refused
provision, connect Secrets, Events, the Node and its Lease, the leader Lease, the shared node
and member Leases, an orphan sweep, deletions, and SIGTERM releasing leadership. The embedded
server records every request; each one the manager made (User-Agent nebula-vnode/...) must be
allowed by the rendered ClusterRole and Roles, and every granted verb must be used.
"""

from __future__ import annotations

import base64
import copy
import functools
import http.client
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevCluster, RequestRecord
from kube import leases, names
from kube.client import USER_AGENT, Kube, NotFoundError, path_for
from placement.blocklist import BlockEntry, entry_id
from placement.blockobject import ENTRIES, encode, entry_path, expires_of, time_text
from providers.base import BlockBreadth, BlockScope, ClaimName, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.server import FakeCloudServer, start_server
from providers.owner import Owner
from tests.support.deploy import rbac as rbac_eval
from tests.support.deploy.manifests import NAMESPACE, ROOT, SERVICE_ACCOUNT, find, manager_container, render
from tests.support.factories import make_pod, make_pod_spec
from tests.support.polling import wait_for

PROVIDER = "gpu"
NODE = names.node_name(PROVIDER)
WORKLOADS = "team-a"
MANAGER_AGENT = USER_AGENT.split("/")[0] + "/"

# Grants the scenario cannot exercise, each with the reason: (role, apiGroup, resource, verb)
# -> why some code path needs it anyway. Empty: the scenario reaches every granted verb.
UNEXERCISED: dict[tuple[str, str, str, str], str] = {}


@pytest.fixture
def kube_user_agent() -> str:
    """The test's own client: a User-Agent of its own, so its calls are not counted."""
    return "nebula-rbac-proof/1"


@pytest.fixture
def fake_cloud() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


class Manager:
    """`manage.py runvnode` as a child process with the production settings module."""

    def __init__(self, cluster: DevCluster, cloud: FakeCloudServer, tmp_path: Path) -> None:
        providers_file = tmp_path / "providers.yaml"
        providers_file.write_text(
            yaml.safe_dump({PROVIDER: {"backend": "providers.fake.FakeProvider", "options": {"url": cloud.url}}})
        )
        settings = find(render("production"), "ConfigMap", "nebula-settings")["data"]
        self.env = dict(os.environ, **settings)
        self.env.update(
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            NEBULA_DB_PATH=str(tmp_path / "console.sqlite3"),
            NEBULA_STATE_DIR=str(tmp_path / "state"),
            POD_NAMESPACE=NAMESPACE,
            # The embedded server calls the webhook by URL (Host: 127.0.0.1), where a cluster
            # calls the Service name the manifest's ALLOWED_HOSTS lists.
            DJANGO_ALLOWED_HOSTS=settings["DJANGO_ALLOWED_HOSTS"] + ",127.0.0.1",
        )
        self.args = [
            sys.executable,
            str(ROOT / "manage.py"),
            "runvnode",
            f"--kubeconfig={cluster.kubeconfig_path}",
            f"--providers-file={providers_file}",
            f"--provider={PROVIDER}",
            "--poll-interval=0.3",
            "--node-ip=127.0.0.1",
            "--kubelet-addr=127.0.0.1:0",
            "--console-addr=127.0.0.1:0",
            "--console-tls",
            "--metrics-addr=127.0.0.1:0",  # not the ConfigMap's :9090 (every interface, a fixed port)
        ]
        self.cwd = tmp_path  # the console's CA and any relative state stay in the test's folder
        self.log = tmp_path / "manager.log"
        self.process: subprocess.Popen[bytes] | None = None

    def migrate(self) -> None:
        """What the Deployment's init container does before the manager starts."""
        pod_spec = find(render("production"), "Deployment", "nebula-manager")["spec"]["template"]["spec"]
        (init,) = pod_spec["initContainers"]
        _python, script, *args = init["command"]
        command = [sys.executable, str(ROOT / script), *args]
        result = subprocess.run(command, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def console_port(self) -> int | None:
        match = re.search(r"console https://[^ ]*:(\d+)", self.log.read_text(errors="replace"))
        return int(match.group(1)) if match else None

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(45)
        finally:
            self.process = None

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)
            self.process = None


@pytest.fixture
def manager(cluster: DevCluster, fake_cloud: FakeCloudServer, tmp_path: Path) -> Iterator[Manager]:
    running = Manager(cluster, fake_cloud, tmp_path)
    yield running
    running.close()


# -- the scenario's objects --------------------------------------------------------------------
def pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A workload Pod of the scenario: in WORKLOADS, bound to the scenario's provider."""
    return make_pod(name, PROVIDER, namespace=WORKLOADS, labels={"app": name, **(labels or {})}, **spec)


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


def events(kube: Kube, reason: str) -> list[dict[str, Any]]:
    items, _ = kube.list("/api/v1/events")
    return [e for e in items if e.get("reason") == reason]


def get(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return kube.get(path)
    except NotFoundError:
        return None


def phase(kube: Kube, name: str) -> str | None:
    found = get(kube, pod_path(name))
    return None if found is None else (found.get("status") or {}).get("phase")


def install_from_manifests(cluster: DevCluster) -> None:
    """What an operator applies first that the embedded server serves: the namespace and the CRD."""
    for obj in render("production"):
        if obj["kind"] in ("Namespace", "CustomResourceDefinition"):
            cluster.apply_manifest(obj)
    cluster.apply_manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKLOADS}})


def install_webhook(cluster: DevCluster, tmp_path: Path, port: int) -> None:
    """The rendered MutatingWebhookConfiguration, pointed at this manager's console by URL (the
    embedded server calls URLs, not Services) with the CA runvnode --console-tls wrote."""
    webhook = copy.deepcopy(find(render("production"), "MutatingWebhookConfiguration", "nebula-placement"))
    ca_pem = (tmp_path / ".nebula" / "console-ca.pem").read_bytes()
    for hook in webhook["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
    cluster.apply_manifest(webhook)


def run_scenario(cluster: DevCluster, kube: Kube, cloud: FakeCloudServer, manager: Manager) -> None:
    """Every path of the manager that reaches the API server today, in order."""
    pods = path_for("pods", namespace=WORKLOADS)
    install_from_manifests(cluster)
    kube.create(ENTRIES, expired_block_entry())  # the leader sweeps it (a delete)
    kube.create(path_for("secrets", namespace=WORKLOADS), secret("app-secret", TOKEN="t0ken", USER="ada"))
    kube.create(
        path_for("configmaps", namespace=WORKLOADS),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"MODE": "batch"}},
    )
    manager.migrate()
    manager.start()
    wait_for(lambda: get(kube, path_for("nodes", name=NODE)), what="the node is registered")
    # The production overlay shares the providers out: the node is served under its own Lease,
    # and the replica renews a member Lease (list, create, update of the shared Leases).
    shared = path_for("leases", namespace=NAMESPACE, group=leases.GROUP)
    wait_for(lambda: get(kube, f"{shared}/nebula-node-{PROVIDER}"), what="the node Lease is held")
    members = [m for m in kube.list(shared)[0] if m["metadata"]["name"].startswith("nebula-member-")]
    assert len(members) == 1, members
    port = wait_for(manager.console_port, what="the console listens")
    assert_console_probes_answer(port)
    assert_a_token_login_reads_the_api(cluster, kube, port)

    # Placement: the webhook gates an opted-in Pod, placement ungates it onto a provider and
    # publishes the NodePool's status.
    install_webhook(cluster, manager.cwd, port)
    cluster.apply_manifest(
        {
            "apiVersion": "nebula.io/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "rbac"},
            "spec": {"providers": [{"name": PROVIDER}]},
        }
    )
    opted_in = pod("placed", labels={names.ENABLED_LABEL: "true", names.POOL_LABEL: "rbac"})
    del opted_in["spec"]["nodeSelector"]
    created = kube.create(pods, opted_in)
    assert [g["name"] for g in created["spec"].get("schedulingGates") or []] == [names.PLACEMENT_GATE]
    wait_for(lambda: phase(kube, "placed") == "Running", 45, what="placement runs the opted-in Pod")

    # A refused provision: the Pod fails with an Event (the fault refuses once).
    cloud.cloud.refuse("capacity", count=1)
    kube.create(pods, pod("refused"))
    wait_for(lambda: phase(kube, "refused") == "Failed", what="the refused Pod fails")
    assert_a_refusal_extends_the_blocklist_entry_another_replica_wrote(kube, cloud, pods)

    # Env from a Secret and a ConfigMap; a Pod waiting for a Secret that appears later.
    env_pod = pod(
        "env",
        container={
            "envFrom": [{"secretRef": {"name": "app-secret"}}, {"configMapRef": {"name": "app-config"}}],
            "env": [{"name": "WHO", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "USER"}}}],
        },
    )
    kube.create(pods, env_pod)
    # Pods waiting for a Secret and a ConfigMap that appear later (each kind is watched for).
    late = pod("late", container={"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}]})
    kube.create(pods, late)
    late_config = pod(
        "late-config",
        container={"env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "later-config", "key": "m"}}}]},
    )
    kube.create(pods, late_config)
    wait_for(lambda: events(kube, "MandatorySecretNotFound"), what="a missing Secret is reported")
    wait_for(lambda: events(kube, "MandatoryConfigMapNotFound"), what="a missing ConfigMap is reported")

    def called(verb: str, resource: str) -> bool:  # e.g. the watch for one missing object
        return any(
            r.verb == verb and r.resource == resource and r.user_agent.startswith(MANAGER_AGENT)
            for r in cluster.request_log.snapshot()
        )

    wait_for(lambda: called("watch", "secrets") and called("watch", "configmaps"), what="the manager watches for both")
    # Its retries repeat the Warning: counted on the one Event (a patch), never a second Event.
    # (Repeats before the first write are created with their count: the patch is what proves it.)
    wait_for(
        lambda: called("patch", "events")
        and any(e.get("count", 1) >= 2 for e in events(kube, "MandatorySecretNotFound")),
        45,
        what="the repeated MandatorySecretNotFound Event counted, and a repeat patched",
    )
    kube.create(path_for("secrets", namespace=WORKLOADS), secret("later", k="v"))
    kube.create(
        path_for("configmaps", namespace=WORKLOADS),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later-config"}, "data": {"m": "1"}},
    )
    for name in ("env", "late", "late-config"):
        connect = path_for("secrets", namespace=WORKLOADS, name=names.connect_secret_name(name))
        wait_for(functools.partial(get, kube, connect), what=f"the connect Secret of {name}")
        wait_for(functools.partial(has_phase, kube, name, "Running"), 45, what=f"{name} runs")

    # An instance no Pod claims is swept.
    # The manager's own owner: the cluster (its kube-system Namespace's UID) and the alias.
    cluster_uid = kube.get(path_for("namespaces", name="kube-system"))["metadata"]["uid"]
    observer = FakeProvider(PROVIDER, {"url": cloud.url}, owner=Owner(cluster_uid, PROVIDER))
    orphan = observer.provision(
        make_pod_spec(namespace=WORKLOADS, name="ghost", uid="0000", container="main", image="busybox"),
        ProvisionRequest(claim=ClaimName("team-a-ghost-aaaaaaaaaa")),
    )
    wait_for(lambda: events(kube, names.EVENT_ORPHAN_TERMINATED), what="the orphan is terminated")
    assert all(i["id"] != orphan.instance_id or i["state"] != "running" for i in cloud.cloud.instances())

    # Deletions: graceful ones finish with the manager's grace-0 delete.
    finished = ("env", "late", "late-config", "refused", "placed")
    for name in finished:
        kube.delete(path_for("pods", namespace=WORKLOADS, name=name))
    for name in finished:
        wait_for(functools.partial(has_phase, kube, name, None), what=f"{name} is gone")

    # Leadership is released on SIGTERM (an update of the leader Lease), the node Lease too, and
    # the replica deletes its member Lease (the Role's `delete`).
    assert manager.stop() == 0
    assert get(kube, f"{shared}/{members[0]['metadata']['name']}") is None
    assert "Traceback" not in manager.log.read_text(errors="replace")


def expired_block_entry() -> dict[str, Any]:
    """A BlocklistEntry that lapsed a minute ago, as a replica long gone left it."""
    scope = BlockScope(PROVIDER, BlockBreadth.PROVIDER, reason="NoCapacity: long ago")
    lapsed = datetime.now(UTC) - timedelta(minutes=1)
    entry = BlockEntry(entry_id(PROVIDER, scope), PROVIDER, scope, scope.reason, None, lapsed, lapsed, 0.0)
    return encode(entry, created=lapsed.timestamp() - 60)


def assert_a_refusal_extends_the_blocklist_entry_another_replica_wrote(
    kube: Kube, cloud: FakeCloudServer, pods: str
) -> None:
    """The refusal is a BlocklistEntry (create); the test stands in for another replica that
    wrote the same scope with a short expiry; the next refusal extends it (get, update)."""
    wait_for(lambda: kube.list(ENTRIES)[0], what="the refusal is written as a BlocklistEntry")
    (written,) = kube.list(ENTRIES)[0]
    name = written["metadata"]["name"]
    kube.delete(entry_path(name))
    soon = time.time() + 20
    spec = dict(written["spec"], expiresAt=time_text(soon), ttlSeconds=20)
    kube.create(
        ENTRIES,
        {"apiVersion": written["apiVersion"], "kind": written["kind"], "metadata": {"name": name}, "spec": spec},
    )
    cloud.cloud.refuse("capacity", count=1)
    kube.create(pods, pod("refused-again"))
    wait_for(lambda: phase(kube, "refused-again") == "Failed", what="the second refused Pod fails")
    wait_for(
        lambda: (expires_of(kube.get(entry_path(name))) or 0) > soon + 60, what="the second refusal extends the entry"
    )
    kube.delete(path_for("pods", namespace=WORKLOADS, name="refused-again"))


def has_phase(kube: Kube, name: str, wanted: str | None) -> bool:
    """The Pod's phase is `wanted` (None: the Pod is gone)."""
    return phase(kube, name) == wanted if wanted is not None else get(kube, pod_path(name)) is None


def pod_path(name: str) -> str:
    return path_for("pods", namespace=WORKLOADS, name=name)


def assert_a_token_login_reads_the_api(cluster: DevCluster, kube: Kube, port: int) -> None:
    """A ServiceAccount bound to the rendered viewer role reads /api/pods with its token: the
    manager reviews the token and asks RBAC (the two review grants)."""
    cluster.apply_manifest(find(render("production"), "ClusterRole", "nebula-console-viewer"))
    kube.create(path_for("serviceaccounts", namespace=WORKLOADS), {"metadata": {"name": "auditor"}})
    binding = {
        "metadata": {"name": "auditor-views"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nebula-console-viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "auditor", "namespace": WORKLOADS}],
    }
    kube.create(path_for("clusterrolebindings", group="rbac.authorization.k8s.io"), binding)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = kube.create(path_for("serviceaccounts", namespace=WORKLOADS, name="auditor", subresource="token"), request)
    status, body = probe(port, "/api/pods", token=answer["status"]["token"])
    assert status == 200, body


def probe(port: int, path: str, *, token: str = "") -> tuple[int, bytes]:
    """A Deployment probe as the kubelet sends it (HTTPS, unverified, Host: localhost)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe certificates either
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        headers = {"Host": "localhost"} | ({"Authorization": f"Bearer {token}"} if token else {})
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def probe_passes(port: int, path: str) -> bool:
    status, _ = probe(port, path)
    return status == 200


def assert_console_probes_answer(port: int) -> None:
    """The liveness and readiness probes pass under the production settings."""
    probes = {p["httpGet"]["path"] for p in probes_of_the_deployment()}
    for path in sorted(probes):
        wait_for(functools.partial(probe_passes, port, path), what=f"the probe {path} passes")


def probes_of_the_deployment() -> list[dict[str, Any]]:
    container = manager_container(render("production"))
    return [container["livenessProbe"], container["readinessProbe"]]


def manager_calls(records: list[RequestRecord]) -> tuple[list[rbac_eval.ApiCall], list[str]]:
    """The manager's resource requests, and any non-resource paths it asked for."""
    calls, other = [], []
    for record in records:
        if not record.user_agent.startswith(MANAGER_AGENT):
            continue
        call = rbac_eval.call_from_path(record.verb, record.path)
        if call is None:
            other.append(record.path)
        else:
            calls.append(call)
    return calls, other


def test_every_call_the_manager_makes_is_allowed_and_every_granted_verb_is_used(
    cluster: DevCluster, kube: Kube, fake_cloud: FakeCloudServer, manager: Manager
) -> None:
    run_scenario(cluster, kube, fake_cloud, manager)
    calls, non_resource = manager_calls(cluster.request_log.snapshot())
    assert {c.verb for c in calls} >= {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert [p for p in non_resource if not rbac_eval.is_discovery(p)] == []

    objects = render("production")
    grants = rbac_eval.grants_for(objects, service_account=SERVICE_ACCOUNT, namespace=NAMESPACE)
    denied = sorted({str(c) for c in calls if not rbac_eval.allowed(c, grants)})
    assert denied == [], "calls the roles do not allow:\n" + "\n".join(denied)

    unused = [a for a in rbac_eval.unused_atoms(grants, calls) if a not in UNEXERCISED]
    assert unused == [], "granted but never used by the scenario (drop them or list them in UNEXERCISED):\n" + (
        "\n".join(map(str, unused))
    )
    assert rbac_eval.wildcards(objects) == []


def test_both_overlays_grant_the_same_roles() -> None:
    kinds = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")

    def roles(overlay: str) -> list[dict[str, Any]]:
        return sorted((o for o in render(overlay) if o["kind"] in kinds), key=lambda o: (o["kind"], str(o["metadata"])))

    assert roles("dev") == roles("production")
