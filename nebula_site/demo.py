"""The demo of `make run`: a Pod `hello` that prints a line a second, and what to try.

Called by `manage.py runvnode --demo`. Creates the Pod through the same API any user
would (idempotent: an existing `hello` is left alone).
Tests: tests/nebula_site/test_make_run.py.
"""

from __future__ import annotations

from typing import Any

from kube import names
from kube.client import ConflictError, Kube, load_api_client, path_for

DEMO_POD = "hello"


def demo_pod(provider: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": DEMO_POD, "namespace": "default", "labels": {"app": "hello"}},
        "spec": {
            "nodeSelector": {names.PROVIDER_KEY: provider},
            "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", 'i=0; while true; do i=$((i+1)); echo "hello $i"; sleep 1; done'],
                }
            ],
        },
    }


def create_demo_pod(kubeconfig: str | None, *, provider: str) -> None:
    kube = Kube(load_api_client(kubeconfig))
    try:
        kube.create(path_for("pods", namespace="default"), demo_pod(provider))
    except ConflictError:
        pass


def instructions(kubeconfig: str) -> str:
    k = f"kubectl --kubeconfig {kubeconfig}"
    return "\n".join(
        [
            "",
            "Nebula is running. Try, in another terminal:",
            f"  {k} get nodes",
            f"  {k} get pods -o wide",
            f"  {k} describe pod {DEMO_POD}",
            f"  {k} logs -f {DEMO_POD}",
            f"  {k} exec -it {DEMO_POD} -- sh",
            f"  {k} delete pod {DEMO_POD}",
            "Stop with Ctrl-C (the demo's process keeps running until its Pod is deleted).",
            "",
        ]
    )
