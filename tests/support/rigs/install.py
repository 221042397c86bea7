"""An install of a rendered overlay on the embedded API server, done the way docs/deploy.md
does it, with this machine as the manager's node: tests/deploy/test_rendered_install.py.

`Install` owns a Pod network (tests/support/servers/netns.py) holding the Pod IP and the API
server's Service IP, `manage.py devcluster` bound to that Service IP, and a kubectl
(1.37) that reaches it; everything that talks to the manager runs inside that network. It
applies the rendered objects the devcluster serves, creates the Secrets as the docs'
commands create them (real `openssl`, real `kubectl create secret`), registers the manager's
address as the console Service's endpoint, and runs the manager's Pod template as its
kubelet would (tests/support/deploy/kubelet.py): the `migrate` init container to completion,
then the manager. Nothing here is a test.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.support.clients.kubectl import KUBECTL_137
from tests.support.deploy.image import ImageConfig, image_config
from tests.support.deploy.kubelet import Container, PodFacts, decoded, run_container
from tests.support.deploy.manifests import DEPLOYMENT, NAMESPACE, ROOT
from tests.support.polling import wait_for
from tests.support.servers.netns import PodNetwork

Obj = dict[str, Any]
POD_IP = "10.244.0.10"  # the manager Pod's address (a kind Pod range)
API_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP, where in-cluster clients find the API
# Kinds of the render the embedded API server does not serve, and who stands in for each:
SKIPPED_KINDS = {
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",  # no RBAC here: tests/deploy/test_rbac_proof.py
    "NetworkPolicy",  # no CNI: tests/deploy/test_manifests.py reads its rules
    "PodDisruptionBudget",  # no evictions here
    "Issuer", "Certificate",  # no cert-manager: the test makes what it would (Secret, caBundle)
    "Deployment",  # the test is the kubelet of its Pod template (no ReplicaSet's Pod to adopt)
}  # fmt: skip


class Install:
    """The Pod network, the devcluster in it, kubectl, and the manager's containers."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.kubeconfig = folder / "kubeconfig"
        self.network = PodNetwork([POD_IP, API_IP])
        self.image: ImageConfig = image_config(ROOT / "Dockerfile")
        self._devcluster: subprocess.Popen[bytes] | None = None
        self.containers: list[Container] = []

    # -- the cluster ---------------------------------------------------------------------------
    def start(self) -> None:
        self.network.start()
        log = (self.folder / "devcluster.log").open("wb")
        self._devcluster = subprocess.Popen(
            self.network.argv([sys.executable, "manage.py", "devcluster", "--addr", f"{API_IP}:0",
                               "--kubeconfig", str(self.kubeconfig)]),
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_for(lambda: "devcluster serving at" in self.log("devcluster"), 60, what="the devcluster to serve")

    def stop_containers(self) -> None:
        """SIGTERM each container (the manager stops its work in order), SIGKILL after the grace."""
        while self.containers:
            self.containers.pop().stop()

    def stop(self) -> None:
        self.stop_containers()
        if self._devcluster is not None:
            os.killpg(self._devcluster.pid, signal.SIGTERM)
            try:
                self._devcluster.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self._devcluster.pid, signal.SIGKILL)
                self._devcluster.wait(10)
        self.network.stop()

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, HOME=str(self.folder))
        result = subprocess.run(
            self.network.argv([KUBECTL_137, "--kubeconfig", str(self.kubeconfig), *args]),
            input=input, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        where = ["-n", namespace] if namespace else []
        found: Obj = json.loads(self.kubectl("get", kind, name, *where, "-o", "json").stdout)
        return found

    def apply(self, objects: list[Obj]) -> str:
        """`kubectl apply -f` the objects (as one file); returns what kubectl printed."""
        path = self.folder / f"apply-{len(list(self.folder.glob('apply-*')))}.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        return self.kubectl("apply", "-f", str(path)).stdout

    def apply_served(self, rendered: list[Obj]) -> list[Obj]:
        """Everything of the render but SKIPPED_KINDS, CRDs first (as `kubectl apply -k` orders them)."""
        served = [o for o in rendered if o["kind"] not in SKIPPED_KINDS]
        served.sort(key=lambda o: o["kind"] not in ("Namespace", "CustomResourceDefinition"))
        self.apply(served)
        return served

    @property
    def server(self) -> tuple[str, int]:
        cluster = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]
        url = urlsplit(cluster["server"])
        assert url.hostname is not None and url.port is not None
        return url.hostname, url.port

    # -- the manager's Pod -----------------------------------------------------------------------
    def register_endpoint(self, rendered: list[Obj], service: Obj) -> None:
        """What the Endpoints controller writes for the Service once the manager is Ready: the
        Pod IP, each Service port's targetPort resolved by name on the manager container."""
        template = _pod_template(rendered)
        ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        subset_ports = []
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            subset_ports.append({"name": port["name"], "port": ports[target] if isinstance(target, str) else target,
                                 "protocol": port.get("protocol", "TCP")})  # fmt: skip
        name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
        self.apply([{"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace},
                     "subsets": [{"addresses": [{"ip": POD_IP}], "ports": subset_ports}]}])  # fmt: skip

    def probe(self, rendered: list[Obj], which: str) -> int:
        """The manager container's `livenessProbe`/`readinessProbe` (httpGet) as the kubelet
        sends it: to the Pod IP, the named port resolved, its headers; HTTP status, or OSError."""
        (container,) = _pod_template(rendered)["spec"]["containers"]
        get = container[which]["httpGet"]
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        port = ports[get["port"]] if isinstance(get["port"], str) else int(get["port"])
        headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}

        def call() -> int:
            if get.get("scheme", "HTTP") == "HTTPS":
                # The kubelet does not verify a probe's certificate.
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                    POD_IP, port, context=context, timeout=5
                )
            else:
                connection = http.client.HTTPConnection(POD_IP, port, timeout=5)
            try:
                connection.request("GET", get["path"], headers=headers)
                return connection.getresponse().status
            finally:
                connection.close()

        return self.network.call_inside(call)

    def pod_facts(self, rendered: list[Obj]) -> PodFacts:
        """What the kubelet reads for the manager's Pod: the Secrets and ConfigMaps it names."""
        template = _pod_template(rendered)
        secrets: dict[str, dict[str, bytes]] = {}
        config_maps: dict[str, dict[str, str]] = {}
        for kind, name in _references(template["spec"]):
            found = self.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
            if found.returncode == 0:
                obj = json.loads(found.stdout)
                if kind == "secret":
                    secrets[name] = decoded(obj)
                else:
                    config_maps[name] = dict(obj.get("data") or {})
        host, port = self.server
        config = yaml.safe_load(self.kubeconfig.read_text())
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        token = config["users"][0]["user"]["token"].encode()
        volumes = self.folder / "pod"
        volumes.mkdir(exist_ok=True)
        return PodFacts(
            name=f"{DEPLOYMENT}-0", namespace=NAMESPACE, pod_ip=POD_IP, secrets=secrets, config_maps=config_maps,
            service_env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)},
            service_account={"token": token, "ca.crt": ca, "namespace": NAMESPACE.encode()}, volumes_root=volumes,
        )  # fmt: skip

    def run_pod(self, rendered: list[Obj], facts: PodFacts) -> Container:
        """Each init container to completion (exit 0), then the one app container, started."""
        spec = _pod_template(rendered)["spec"]
        files = {self.image.workdir: ROOT, "/opt/venv": Path(sys.prefix).resolve()}
        assert self.image.env["PATH"].startswith("/opt/venv/bin:"), "the image's virtualenv moved: update files"
        for init in spec.get("initContainers") or []:
            container = self._run(spec, init, facts, files)
            code = container.wait(90)
            assert code == 0, f"init container {init['name']} exited {code}:\n{container.output()}"
        (app,) = spec["containers"]
        return self._run(spec, app, facts, files)

    def _run(self, spec: Obj, container: Obj, facts: PodFacts, files: dict[str, Path]) -> Container:
        started = run_container(spec, container, image=self.image, image_files=files, facts=facts,
                                network=self.network, log=self.folder / f"{container['name']}.log")  # fmt: skip
        self.containers.append(started)
        return started


def _pod_template(rendered: list[Obj]) -> Obj:
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment" and o["metadata"]["name"] == DEPLOYMENT]
    template: Obj = deployment["spec"]["template"]
    return template


def _references(spec: Obj) -> Iterator[tuple[str, str]]:
    """(secret|configmap, name) for every Secret and ConfigMap the Pod spec names."""
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            yield "secret", volume["secret"]["secretName"]
        if "configMap" in volume:
            yield "configmap", volume["configMap"]["name"]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                yield "configmap", source["configMapRef"]["name"]
            if "secretRef" in source:
                yield "secret", source["secretRef"]["name"]
        for item in container.get("env") or []:
            ref = item.get("valueFrom") or {}
            if "secretKeyRef" in ref:
                yield "secret", ref["secretKeyRef"]["name"]
            if "configMapKeyRef" in ref:
                yield "configmap", ref["configMapKeyRef"]["name"]


@contextmanager
def installed(folder: Path) -> Iterator[Install]:
    install = Install(folder)
    try:
        install.start()
        yield install
    finally:
        install.stop()
