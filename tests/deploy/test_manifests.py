"""deploy/: both overlays render, every object validates (the kubernetes client's OpenAPI
models, strict; cert-manager's kinds structurally; the embedded API server's dry-run for the
kinds it serves), and the Deployment, Services, webhook and NetworkPolicy say what the issue
asks of them, read from the rendered objects."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from django.urls import Resolver404, resolve

from devcluster import DevCluster
from kube.client import Kube, KubeError, NotFoundError, load_api_client
from tests.support.deploy import schema as schema_check
from tests.support.deploy.manifests import (
    DEPLOYMENT,
    NAMESPACE,
    OVERLAYS,
    SERVICE_ACCOUNT,
    find,
    manager_container,
    render,
)

Obj = dict[str, Any]


def pod_spec(objects: list[Obj]) -> Obj:
    spec: Obj = find(objects, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]
    return spec


def env_of(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_is_valid_for_its_schema(overlay: str) -> None:
    objects = render(overlay)
    assert len(objects) >= 15
    problems = {}
    for obj in objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            found = schema_check.validate_cert_manager(obj)
        else:
            found = schema_check.validate_builtin(obj)
        if found:
            problems[f"{obj['kind']}/{obj['metadata']['name']}"] = found
    assert problems == {}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"].update(paht="/"), "paht"),
        (lambda d: d["spec"].update(replicas="2"), "replicas"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"), "name"),
        (lambda d: d["spec"]["template"]["spec"].update(automountServiceAcountToken=True), "automountServiceAcount"),
    ],
)
def test_the_schema_check_rejects_unknown_fields_wrong_types_and_missing_required_ones(
    mutate: Any, expected: str
) -> None:
    deployment = copy.deepcopy(find(render("production"), "Deployment", DEPLOYMENT))
    assert schema_check.validate_builtin(deployment) == []
    mutate(deployment)
    problems = schema_check.validate_builtin(deployment)
    assert problems and any(expected in p for p in problems)


def test_the_cert_manager_check_rejects_what_cert_manager_would() -> None:
    objects = render("production")
    certificate = copy.deepcopy(find(objects, "Certificate", "nebula-console"))
    certificate["spec"]["privateKey"]["algorithm"] = "DSA"
    certificate["spec"]["dnsName"] = ["typo"]
    del certificate["spec"]["issuerRef"]
    problems = schema_check.validate_cert_manager(certificate)
    assert any("algorithm" in p for p in problems)
    assert any("dnsName: unknown field" in p for p in problems)
    assert any("issuerRef: required" in p for p in problems)
    issuer = copy.deepcopy(find(objects, "Issuer", "nebula-selfsigned"))
    issuer["spec"]["ca"] = {"secretName": "x"}
    assert schema_check.validate_cert_manager(issuer) == [
        ".spec: exactly one of ['selfSigned', 'ca', 'acme', 'vault', 'venafi'] must be set"
    ]


@pytest.fixture
def dry_run_cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, Kube]]:
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig")) as cluster:
        assert cluster.kubeconfig_path is not None
        yield cluster, Kube(load_api_client(cluster.kubeconfig_path, user_agent="nebula-deploy-test/1"))


def collection_path(cluster: DevCluster, obj: Obj) -> str | None:
    rt = cluster.registry.by_kind(obj["apiVersion"], obj["kind"])
    if rt is None:
        return None
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else "/api/v1"
    namespace = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_served_kinds_pass_a_server_side_dry_run_and_nothing_is_stored(
    overlay: str, dry_run_cluster: tuple[DevCluster, Kube]
) -> None:
    cluster, kube = dry_run_cluster
    objects = render(overlay)
    cluster.apply_manifest(find(objects, "Namespace", NAMESPACE))  # namespaced objects need it
    tried = []
    for obj in objects:
        path = collection_path(cluster, obj)
        if path is None or obj["kind"] == "Namespace":
            continue
        try:
            kube.request("POST", path, query=[("dryRun", "All")], body=obj)
        except KubeError as exc:
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {exc}") from exc
        with pytest.raises(NotFoundError):
            kube.get(f"{path}/{obj['metadata']['name']}")
        tried.append(obj["kind"])
    assert {"Deployment", "ServiceAccount", "ConfigMap", "CustomResourceDefinition"} <= set(tried)


# -- the Deployment ------------------------------------------------------------------------------
def test_production_runs_two_replicas_with_leader_election() -> None:
    objects = render("production")
    assert find(objects, "Deployment", DEPLOYMENT)["spec"]["replicas"] == 2
    for overlay in OVERLAYS:
        args = manager_container(render(overlay))["args"]
        assert "--no-leader-election" not in args


def runvnode_options(overlay: str) -> Any:
    command = load_command_class("nebula_site", "runvnode")
    return command.create_parser("manage.py", "runvnode").parse_args(manager_container(render(overlay))["args"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runvnode_accepts_every_flag_the_deployment_passes(overlay: str) -> None:
    options = runvnode_options(overlay)
    assert options.kubelet_addr == ":10250"
    assert options.console_addr == ":8443"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_console_serves_the_certificate_of_the_mounted_secret(overlay: str) -> None:
    """--console-cert/--console-key name the files of the Secret nebula-console-tls (a
    kubernetes.io/tls Secret's keys, where the volume is mounted); --console-tls would serve a
    CA of its own, which the webhook's caBundle does not hold (issue 15)."""
    objects = render(overlay)
    options = runvnode_options(overlay)
    assert options.console_tls is False
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    (mount,) = [m for m in manager_container(objects)["volumeMounts"] if m["name"] == "console-tls"]
    assert volumes["console-tls"]["secret"]["secretName"] == "nebula-console-tls"
    assert "optional" not in volumes["console-tls"]["secret"]  # the Pod waits for it
    assert mount["readOnly"] is True
    assert options.console_cert == f"{mount['mountPath']}/tls.crt"
    assert options.console_key == f"{mount['mountPath']}/tls.key"


def test_each_overlay_adds_its_provider_to_the_base_flags() -> None:
    base = manager_container(render("dev"))["args"][:5]
    assert manager_container(render("dev"))["args"] == [*base, "--provider=local"]
    production = manager_container(render("production"))
    assert production["args"] == [*base, "--providers-file=/etc/nebula/providers/providers.yaml", "--provider=aws"]
    (mount,) = [m for m in production["volumeMounts"] if m["name"] == "providers"]
    assert runvnode_options("production").providers_file.startswith(mount["mountPath"] + "/")


def test_the_manager_gets_its_ip_and_namespace_from_field_refs() -> None:
    env = env_of(manager_container(render("production")))
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_ports_and_probes_are_on_the_named_listeners() -> None:
    container = manager_container(render("production"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"kubelet": 10250, "console": 8443, "metrics": 9090}
    assert f"--kubelet-addr=:{ports['kubelet']}" in container["args"]
    assert f"--console-addr=:{ports['console']}" in container["args"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "console", "HTTPS")
        # Django's ALLOWED_HOSTS admits the Host header the probe sends.
        host = {h["name"]: h["value"] for h in get["httpHeaders"]}["Host"]
        settings = find(render("production"), "ConfigMap", "nebula-settings")["data"]
        assert host in settings["DJANGO_ALLOWED_HOSTS"].split(",")


def test_the_probe_paths_are_routed_by_the_console() -> None:
    container = manager_container(render("production"))
    for probe in ("livenessProbe", "readinessProbe"):
        path = container[probe]["httpGet"]["path"]
        try:
            resolve(path)
        except Resolver404:
            pytest.fail(f"{probe} {path} is not routed by nebula_site.urls")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_non_root_read_only_and_bounded(overlay: str) -> None:
    spec = pod_spec(render(overlay))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    for container in spec["containers"] + spec.get("initContainers", []):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        for kind in ("requests", "limits"):
            assert set(container["resources"][kind]) == {"cpu", "memory"}, container["name"]


def test_every_writable_path_the_settings_name_is_on_an_empty_dir() -> None:
    objects = render("production")
    spec = pod_spec(objects)
    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    settings = find(objects, "ConfigMap", "nebula-settings")["data"]
    for container in spec["containers"] + spec["initContainers"]:
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        writable = [p for p, name in mounts.items() if name in empty_dirs]
        for key in ("NEBULA_DB_PATH", "NEBULA_STATE_DIR"):
            assert any(settings[key].startswith(p + "/") for p in writable), (container["name"], key)
        assert "/tmp" in writable
        assert "/app/.nebula" in writable


def test_only_the_manager_pod_mounts_a_service_account_token() -> None:
    objects = render("production")
    assert find(objects, "ServiceAccount", SERVICE_ACCOUNT)["automountServiceAccountToken"] is False
    spec = pod_spec(objects)
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert spec["automountServiceAccountToken"] is True


# -- secrets -------------------------------------------------------------------------------------
def secret_references(spec: Obj) -> set[str]:
    names = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    for container in spec["containers"] + spec.get("initContainers", []):
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                names.add(source["secretRef"]["name"])
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_credentials_are_secrets_referenced_by_name_never_shipped(overlay: str) -> None:
    objects = render(overlay)
    assert [o for o in objects if o["kind"] == "Secret"] == []
    assert {"nebula-console", "nebula-console-tls"} <= secret_references(pod_spec(objects))
    for config in (o for o in objects if o["kind"] == "ConfigMap"):
        assert not any("SECRET" in key.upper() or "PASSWORD" in key.upper() for key in config.get("data", {}))


@pytest.mark.parametrize("key", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_production_reads_the_aws_keys_from_a_secret(key: str) -> None:
    env = env_of(manager_container(render("production")))
    assert env[key]["valueFrom"]["secretKeyRef"]["name"] == "nebula-aws-credentials"
    assert "value" not in env[key]


def test_production_takes_the_database_url_from_a_secret_in_both_containers() -> None:
    spec = pod_spec(render("production"))
    for container in spec["containers"] + spec["initContainers"]:
        env = env_of(container)
        assert env["DATABASE_URL"]["valueFrom"] == {"secretKeyRef": {"name": "nebula-database", "key": "url"}}
    assert "DATABASE_URL" not in env_of(manager_container(render("dev")))


# -- Services, webhook, NetworkPolicy --------------------------------------------------------------
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_calls_the_console_service_on_a_routed_path(overlay: str) -> None:
    objects = render(overlay)
    (webhook,) = find(objects, "MutatingWebhookConfiguration", "nebula-placement")["webhooks"]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["objectSelector"] and webhook["namespaceSelector"]
    target = webhook["clientConfig"]["service"]
    service = find(objects, "Service", target["name"])
    assert service["metadata"]["namespace"] == target["namespace"]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    assert port["targetPort"] in {p["name"] for p in manager_container(objects)["ports"]}
    labels = find(objects, "Deployment", DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    resolve(target["path"])
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert NAMESPACE in excluded, "the manager's own Pods must never wait for the manager"


def test_production_gets_the_webhook_certificate_and_its_ca_from_cert_manager() -> None:
    objects = render("production")
    webhook = find(objects, "MutatingWebhookConfiguration", "nebula-placement")
    namespace, name = webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = find(objects, "Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    service = webhook["webhooks"][0]["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    issuer = certificate["spec"]["issuerRef"]
    assert find(objects, issuer["kind"], issuer["name"])["metadata"]["namespace"] == namespace
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    assert volumes["console-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_kubelet_port_admits_only_the_control_plane_and_the_console_only_the_namespace(overlay: str) -> None:
    objects = render(overlay)
    policy = find(objects, "NetworkPolicy", "nebula-manager")
    labels = find(objects, "Deployment", DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule["from"] for rule in policy["spec"]["ingress"]}
    assert set(by_port) == {"kubelet", "console", "metrics"}  # metrics: tests/deploy/test_monitoring.py
    (kubelet_peer,) = by_port["kubelet"]
    cidr = ipaddress.ip_network(kubelet_peer["ipBlock"]["cidr"])
    assert cidr.num_addresses < 2**24 and not cidr.is_global  # a private range, not the world
    # Inside the namespace (a podSelector without namespaceSelector), and the control plane for
    # the admission webhook, which the console listener serves.
    assert by_port["console"] == [{"podSelector": {}}, kubelet_peer]


def test_the_control_plane_range_is_an_overlay_parameter() -> None:
    cidrs = {
        overlay: find(render(overlay), "NetworkPolicy", "nebula-manager")["spec"]["ingress"][0]["from"][0]["ipBlock"]
        for overlay in OVERLAYS
    }
    assert cidrs["dev"] != cidrs["production"]
    for overlay in OVERLAYS:
        assert not [o for o in render(overlay) if o["metadata"]["name"] == "nebula-network"]  # local-config only
