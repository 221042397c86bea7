"""deploy/components/modal and deploy/components/runpod: an overlay that adds one renders
(real `kubectl kustomize`) with the cloud's Secret mounted read-only where the provider's
`credentials_dir` points, readable by the manager (it runs as 10001, the volume's fsGroup),
never as an env var; the Modal one also asks the SDK for V1 sandboxes (MODAL_SANDBOX_V2=0),
the only kind the provider lists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.deploy.manifests import DEPLOYMENT, ROOT, find, manager_container, render_copy

CASES = {
    "modal": ("nebula-modal-credentials", "/etc/nebula/modal", {"MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"}),
    "runpod": ("nebula-runpod", "/etc/nebula/runpod", {"RUNPOD_API_KEY"}),
}


@pytest.mark.parametrize("component", sorted(CASES))
def test_the_component_mounts_the_clouds_secret_for_the_manager_to_read(tmp_path: Path, component: str) -> None:
    secret_name, folder, keys = CASES[component]
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", deploy)
    overlay = deploy / "overlays" / component
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [../dev]\ncomponents: [../../components/{component}]\n"
    )
    objects = render_copy(deploy, component)
    pod_spec = find(objects, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod_spec["volumes"] if (v.get("secret") or {}).get("secretName") == secret_name]
    container = manager_container(objects)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == folder and mount["readOnly"] is True
    mode = volume["secret"].get("defaultMode", 0o644)
    group = pod_spec["securityContext"]["fsGroup"]
    user = container.get("securityContext", {}).get("runAsUser") or pod_spec["securityContext"].get("runAsUser")
    assert user != 0 and group == user and mode & 0o040, "the manager (not root) must be able to read the files"
    assert not mode & 0o007, "nobody else may read the credentials"
    env = {e["name"]: e for e in container.get("env") or ()}
    assert not keys & set(env), "credentials are files, never env vars"
    refs = [(e.get("valueFrom") or {}).get("secretKeyRef") or {} for e in env.values()]
    assert secret_name not in {ref.get("name") for ref in refs}
    if component == "modal":
        assert env["MODAL_SANDBOX_V2"]["value"] == "0"
