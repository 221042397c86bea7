"""The demo of `make run`: a Pod `hello` that prints a line a second, what to try, and a
console login.

Called by `manage.py runvnode --demo`. Creates the Pod through the same API any user
would (idempotent: an existing `hello` is left alone). The login (`reset_dev_login`) is made
only under `--dev-cluster`: a fresh random password for a local superuser at every start,
never a fixed one, and never on a real cluster.
Tests: tests/nebula_site/test_make_run.py.
"""

from __future__ import annotations

import secrets
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, load_api_client, path_for

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
