"""The manifests proven by what they render (issue 15): each overlay is rendered, installed on
the embedded API server as docs/deploy.md installs it (its shell steps run as written:
tests/support/deploy/steps.py), and the manager's Pod template is run as its kubelet would run
it on the `Dockerfile`'s image (the exact argv, env, mounts; tests/support/deploy/kubelet.py). An
opted-in Pod is then admitted through the webhook by the console Service (TLS verified with the
Service's name against the caBundle), gated, placed, Running, and `kubectl logs` reads it.

dev: the local provider and SQLite in the emptyDir. production: AWS EC2 on moto, its instances
booted (tests/providers/aws/ec2_vms.py), PostgreSQL from the Secret nebula-database, and the
certificate cert-manager's self-signed Issuer would make, its CA injected as its CA injector would.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from moto import mock_aws
from moto.server import ThreadedMotoServer

from tests.providers.aws.ec2_vms import booting_vms
from tests.providers.aws.moto_ec2 import AMI, serve_consoles
from tests.support.deploy.manifests import DEPLOY, find, manager_container, render, render_copy
from tests.support.deploy.steps import doc_block, run_step
from tests.support.polling import wait_for
from tests.support.rigs.install import POD_IP, Install, installed
from tests.support.servers.postgres import postgres_database

pytestmark = pytest.mark.slow

Obj = dict[str, Any]
KIND = "From an empty cluster to `kubectl logs` (kind)"
GATE_TOLERATION = {"key": "nebula.io/provider", "operator": "Exists", "effect": "NoSchedule"}


def without_apply_k(block: str) -> str:
    """Step 6 without its `kubectl apply -k`: `Install.apply_served` applies what the embedded
    API server serves of the same render (tests/support/rigs/install.py names what it skips)."""
    kept = [line for line in block.splitlines() if not line.startswith("kubectl apply -k ")]
    assert len(kept) < len(block.splitlines()), "step 6 no longer applies the overlay"
    return "\n".join(kept)


def node_ready(install: Install, node: str) -> Obj | None:
    found = install.kubectl("get", "node", node, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    status = json.loads(found.stdout)["status"]
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready") == "True"
    return status if ready else None


def events_of(install: Install, pod: str) -> list[Obj]:
    listed = json.loads(install.kubectl("get", "events", "-o", "json").stdout)["items"]
    return [e for e in listed if e.get("involvedObject", {}).get("name") == pod]


def becomes_ready(install: Install, rendered: list[Obj]) -> None:
    """The kubelet's probes pass (the Endpoints controller lists only a Ready Pod)."""
    for probe in ("livenessProbe", "readinessProbe"):
        wait_for(functools.partial(passes, install, rendered, probe), 60, what=f"the {probe}", ignoring=(OSError,))


def passes(install: Install, rendered: list[Obj], probe: str) -> bool:
    return install.probe(rendered, probe) == 200


def check_the_opted_in_pod(install: Install, *, node: str, step_8: str, steps: Path, timeout: float) -> str:
    """Steps 8 and 9: the Pod is admitted (the webhook's toleration), placed (placement's
    nodeSelector and Placed Event, the gate gone), Running on `node`; `kubectl logs` reads it."""
    run_step(install, step_8, cwd=steps, env={"KUBECTL_WAIT_TIMEOUT": str(timeout)})
    pod = install.get("pod", "trial", "default")
    assert GATE_TOLERATION in pod["spec"]["tolerations"], "the webhook did not admit it"
    assert not pod["spec"].get("schedulingGates"), "placement did not lift its gate"
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["nodeSelector"] == {"nebula.io/provider": node.removeprefix("nebula-")}
    assert [e for e in events_of(install, "trial") if e["reason"] == "Placed"], "no Placed Event"
    assert pod["status"]["phase"] == "Running"
    wait_for(lambda: "hello 3" in install.kubectl("logs", "trial").stdout, timeout, what="the Pod's third line")
    return run_step(install, doc_block(KIND, 9), cwd=steps).stdout


def started_moto(host: str, port: int) -> ThreadedMotoServer:
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    return server


def with_wait_timeout(block: str) -> str:
    """`kubectl wait`'s 30 s default is a kind cluster's; a loaded test machine gets the test's."""
    return re.sub(r"^kubectl wait ", 'kubectl wait --timeout="${KUBECTL_WAIT_TIMEOUT}s" ', block, flags=re.M)


# -- dev ---------------------------------------------------------------------------------------
def test_the_dev_overlay_installs_as_documented_and_runs_an_opted_in_pod(tmp_path: Path) -> None:
    rendered = render("dev")
    steps = tmp_path / "steps"
    with installed(tmp_path) as install:
        run_step(install, doc_block(KIND, 4), cwd=steps)  # the namespace and the console's key
        run_step(install, doc_block(KIND, 5), cwd=steps)  # openssl: the CA, the certificate, its Secret
        install.apply_served(rendered)
        run_step(install, without_apply_k(doc_block(KIND, 6)), cwd=steps)  # the caBundle patch
        webhook = install.get("mutatingwebhookconfiguration", "nebula-placement")
        assert webhook["webhooks"][0]["clientConfig"]["caBundle"]

        manager = install.run_pod(rendered, install.pod_facts(rendered))
        assert manager_container(rendered)["args"][-1] == "--provider=local"
        becomes_ready(install, rendered)
        # Until the Service has the manager as its endpoint, the webhook (failurePolicy Fail)
        # refuses opted-in Pods: the API server calls it through the Service, not an address.
        early = install.kubectl("run", "early", "--image=busybox", "--labels=nebula.io/enabled=true", check=False)
        assert early.returncode != 0 and 'no endpoints available for service "nebula-console"' in early.stderr
        install.register_endpoint(rendered, find(rendered, "Service", "nebula-console"))
        status = wait_for(lambda: node_ready(install, "nebula-local"), 60, what="nebula-local Ready")
        assert {"type": "InternalIP", "address": POD_IP} in status["addresses"]
        served = check_the_opted_in_pod(
            install, node="nebula-local", step_8=with_wait_timeout(doc_block(KIND, 8)), steps=steps, timeout=60
        )
        assert "hello 1" in served and "from inside" in served
        assert manager.process.poll() is None, install.log("manager")


# -- production --------------------------------------------------------------------------------
PRODUCTION = "Production (any cluster, AWS EC2 as the provider)"
MOTO_PORT = 5000  # inside the test's own Pod network: nothing else listens there
SSH_PORT = 2222  # the booted instances' sshd, each on its own 127.x address in that network
POSTGRES_PORT = 5432


def edited_deploy(folder: Path, *, endpoint: str, ssh_user: str) -> Path:
    """A copy of deploy/ with step 3's edits: providers.yaml (the region, an AMI moto serves,
    and what reaching this machine's instances needs: the EC2 endpoint, the login, a short
    poll) and network.yaml (the Pod network's range)."""
    copy = folder / "deploy"
    shutil.copytree(DEPLOY, copy)
    overlay = copy / "overlays" / "production"
    providers = yaml.safe_load((overlay / "providers.yaml").read_text())
    assert providers["aws"]["options"]["ami"] == "ami-REPLACE-ME", "the placeholder the docs tell users to edit"
    providers["aws"]["options"].update(
        regions=["us-east-1"], ami=AMI, endpoint_url=endpoint, ssh_user=ssh_user, ssh_port=SSH_PORT,
        poll_interval=1, connect_timeout=5, max_attempts=2,
    )  # fmt: skip
    (overlay / "providers.yaml").write_text(yaml.safe_dump(providers))
    network = yaml.safe_load((overlay / "network.yaml").read_text())
    network["data"]["controlPlaneCIDR"] = "10.96.0.0/12"
    (overlay / "network.yaml").write_text(yaml.safe_dump(network))
    return copy


def issue_like_cert_manager(install: Install, rendered: list[Obj], folder: Path) -> None:
    """What cert-manager does for the rendered Certificate and the webhook's annotation: a
    self-signed (Issuer `selfSigned`) ECDSA P-256 certificate for its dnsNames in the Secret it
    names (tls.crt, tls.key, ca.crt), then that ca.crt as the caBundle of the webhook whose
    `cert-manager.io/inject-ca-from` names the Certificate (what its CA injector writes)."""
    webhook = find(rendered, "MutatingWebhookConfiguration", "nebula-placement")
    namespace, name = webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = find(rendered, "Certificate", name)
    spec = certificate["spec"]
    assert find(rendered, "Issuer", spec["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    assert (spec["privateKey"]["algorithm"], spec["privateKey"]["size"]) == ("ECDSA", 256)
    folder.mkdir(parents=True)
    san = ",".join(f"DNS:{d}" for d in spec["dnsNames"])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "90",
         "-subj", f"/CN={spec['dnsNames'][0]}", "-addext", f"subjectAltName={san}",
         "-keyout", "tls.key", "-out", "tls.crt"],
        cwd=folder, check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    shutil.copy(folder / "tls.crt", folder / "ca.crt")  # a self-signed certificate is its own CA
    install.kubectl("-n", namespace, "create", "secret", "generic", spec["secretName"], "--type=kubernetes.io/tls",
                    *(f"--from-file={folder / key}" for key in ("tls.crt", "tls.key", "ca.crt")))  # fmt: skip
    bundle = base64.b64encode((folder / "ca.crt").read_bytes()).decode()
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
             for i in range(len(webhook["webhooks"]))]  # fmt: skip
    install.kubectl("patch", "mutatingwebhookconfiguration", webhook["metadata"]["name"], "--type=json",
                    "-p", json.dumps(patch))  # fmt: skip


def test_the_production_overlay_installs_as_documented_and_runs_an_opted_in_pod_on_ec2(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    user = pwd.getpwuid(os.getuid()).pw_name
    with mock_aws(), pytest.MonkeyPatch.context() as patch, installed(tmp_path) as install:
        serve_consoles(patch)
        moto = install.network.call_inside(lambda: started_moto("127.0.0.1", MOTO_PORT))
        with (
            postgres_database("nebula", host="127.0.0.1", port=POSTGRES_PORT, network=install.network) as database,
            booting_vms(tmp_path / "vms", region="us-east-1", ssh_port=SSH_PORT, ssh_user=user) as vms,
        ):
            try:
                rendered = render_copy(edited_deploy(tmp_path, endpoint=f"http://127.0.0.1:{MOTO_PORT}",
                                                     ssh_user=user), "production")  # fmt: skip
                run_step(install, doc_block(PRODUCTION, 4), cwd=steps, env={"DATABASE_URL": database.url})
                install.apply_served(rendered)
                issue_like_cert_manager(install, rendered, tmp_path / "cert-manager")
                manager = install.run_pod(rendered, install.pod_facts(rendered))
                becomes_ready(install, rendered)
                install.register_endpoint(rendered, find(rendered, "Service", "nebula-console"))
                wait_for(lambda: node_ready(install, "nebula-aws"), 60, what="nebula-aws Ready")
                step_8 = doc_block(KIND, 8).replace("providers: [{name: local}]", "providers: [{name: aws}]")
                served = check_the_opted_in_pod(
                    install, node="nebula-aws", step_8=with_wait_timeout(step_8), steps=steps, timeout=60
                )
                assert "hello 1" in served and "from inside" in served
                (vm,) = vms.booted()
                assert any(argv[:2] == ["run", "-d"] for argv in vm.docker_calls())
                # The mirror and the logins are in PostgreSQL (the Secret's URL), not in the emptyDir.
                wait_for(lambda: ("trial", "Running") in database.rows("SELECT name, phase FROM console_trackedpod"),
                         what="the Pod in the PostgreSQL mirror")  # fmt: skip
                assert not (tmp_path / "pod" / "state" / "console.sqlite3").exists()
                assert manager.process.poll() is None, install.log("manager")
            finally:
                install.stop_containers()
                moto.stop()
