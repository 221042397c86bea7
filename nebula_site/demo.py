"""The demo of `make run`: a Pod `hello` that prints a line a second, what to try, and a
console login.

Called by `manage.py runvnode --demo` once it leads. Creates the Pod through the same API any
user would, once its node is Ready (idempotent: an existing `hello` is left alone); `TRY` is
the one list of what to try, which the README repeats (a test compares them). The login (`reset_dev_login`) is made
only under `--dev-cluster`: a fresh random password for a local superuser at every start,
never a fixed one, and never on a real cluster.
Tests: tests/nebula_site/test_make_run.py,
tests/nebula_site/test_devstart.py::test_the_demo_pod_is_created_once_its_node_is_ready_and_the_dev_key_is_not_a_warning.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, KubeError, load_api_client, path_for

DEMO_POD = "hello"
DEV_LOGIN = "dev"


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


def create_demo_pod(kube: Kube, *, provider: str) -> None:
    try:
        kube.create(path_for("pods", namespace="default"), demo_pod(provider))
    except ConflictError:
        pass


def node_ready(kube: Kube, node: str) -> bool:
    """The node's Ready condition is True (a Pod created now is scheduled at once, with no
    FailedScheduling Event first)."""
    try:
        conditions = (kube.get(path_for("nodes", name=node)).get("status") or {}).get("conditions") or []
    except KubeError:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def create_when_ready(
    kubeconfig: str | None, *, provider: str, stop: threading.Event, say: Callable[[str], None], poll: float = 0.1
) -> None:
    """Wait (until `stop`) for the provider's node to be Ready, then create the demo Pod and
    say what to try."""
    kube = Kube(load_api_client(kubeconfig))
    try:
        while not stop.is_set():
            if node_ready(kube, names.node_name(provider)):
                create_demo_pod(kube, provider=provider)
                say(instructions(kubeconfig or "$KUBECONFIG"))
                return
            stop.wait(poll)
    finally:
        kube.close()


# What to try, after `kubectl --kubeconfig <path> ` (a comment after two spaces and `#`).
TRY = (
    "get nodes",
    "get pods -o wide",
    f"describe pod {DEMO_POD}",
    f"logs -f {DEMO_POD}",
    f"exec -it {DEMO_POD} -- sh",
    f"top pod {DEMO_POD}  # once the embedded metrics-server has scraped twice (~30 s)",
    f"debug -it {DEMO_POD} --image=busybox -- sh",
    f"delete pod {DEMO_POD}",
)


def instructions(kubeconfig: str) -> str:
    """The banner `make run` prints once the demo Pod is created (README.md shows it verbatim)."""
    k = f"kubectl --kubeconfig {kubeconfig}"
    return "\n".join(
        [
            "",
            "Nebula is running. Try, in another terminal:",
            *(f"  {k} {line}" for line in TRY),
            f"Through placement: docs/deploy.md step 8 with KUBECONFIG={kubeconfig}.",
            "Stop with Ctrl-C: the processes of every Pod here end with it (nothing could delete those Pods after).",
            "",
        ]
    )


def reset_dev_login() -> tuple[str, str]:
    """Create (or reset) the superuser `dev` of this process's console database with a new
    random password; return the user name and the password, for the terminal only."""
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(16)
    user_model = get_user_model()
    user = user_model.objects.filter(username=DEV_LOGIN).first()
    if user is None:
        user_model.objects.create_superuser(DEV_LOGIN, email="", password=password)
    else:
        user.is_active = user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
    return DEV_LOGIN, password


def login_line(console_url: str | None, user: str, password: str) -> str:
    where = f"Console {console_url}: " if console_url else "Console (not served): "
    return f"{where}log in as {user} / {password} (a local dev login for the embedded cluster only, new each start)"
