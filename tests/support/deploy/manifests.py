"""The rendered deploy/ overlays, for every test in tests/deploy.

Renders with `kubectl kustomize` (kubectl 1.37 in the virtualenv has kustomize built in) once
per overlay per session; callers get fresh copies. Lookups by kind and name fail loudly.
"""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dev", "production")
NAMESPACE = "nebula-system"
SERVICE_ACCOUNT = "nebula-manager"
DEPLOYMENT = "nebula-manager"

Obj = dict[str, Any]


def kubectl() -> str:
    """The virtualenv's kubectl (1.37, kustomize v5), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl not found: `make bootstrap` installs it into .venv")
    return found


def _kustomize(folder: Path) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed:\n{result.stderr}")
    return result.stdout


@functools.cache
def _rendered(overlay: str) -> str:
    return _kustomize(DEPLOY / "overlays" / overlay)


def render(overlay: str) -> list[Obj]:
    """Every object `kubectl kustomize deploy/overlays/<overlay>` prints."""
    return [copy.deepcopy(doc) for doc in yaml.safe_load_all(_rendered(overlay)) if doc]


def render_copy(deploy: Path, overlay: str) -> list[Obj]:
    """The same for a copy of deploy/ at `deploy` (edited as docs/deploy.md tells a user to)."""
    return [doc for doc in yaml.safe_load_all(_kustomize(deploy / "overlays" / overlay)) if doc]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def find_prefixed(objects: list[Obj], kind: str, prefix: str) -> Obj:
    """A generated object (a ConfigMap with a content hash suffix)."""
    matches = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"].startswith(prefix)]
    assert len(matches) == 1, f"expected one {kind}/{prefix}*, found {len(matches)}"
    return matches[0]


def manager_container(objects: list[Obj]) -> Obj:
    pod_spec = find(objects, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "manager"]
    return dict(container)
