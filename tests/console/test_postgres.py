"""The console on PostgreSQL (`DATABASE_URL`): `runvnode` mirrors into a real PostgreSQL
server, and a second process, as a console on another machine would, reads the same rows
through the ORM and the dashboard.

The server is Debian's `postgresql` (installed by `make test`), run by `tests.support.servers.postgres`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devcluster import DevCluster
from kube.client import Kube, load_api_client, path_for
from tests.support.factories import make_pod
from tests.support.pods import phase_of
from tests.support.polling import wait_for
from tests.support.servers.postgres import console_database

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    with console_database() as url:
        yield url


def test_runvnode_mirrors_into_postgresql_and_another_process_reads_it(database_url: str, tmp_path: Path) -> None:
    cluster = DevCluster("127.0.0.1", 0, kubeconfig_path=str(tmp_path / "kubeconfig"))
    cluster.start()
    env = {**os.environ, "DATABASE_URL": database_url}
    providers = tmp_path / "providers.yaml"
    providers.write_text(yaml.safe_dump({"gpu": {"backend": "providers.fake.FakeProvider", "options": {}}}))
    log = (tmp_path / "manager.log").open("wb")
    manager = subprocess.Popen(
        [sys.executable, "manage.py", "runvnode", "--kubeconfig", str(tmp_path / "kubeconfig"),
         "--providers-file", str(providers), "--provider", "gpu", "--poll-interval", "0.3",
         "--node-ip", "127.0.0.1", "--kubelet-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0",
         "--no-leader-election", "--shutdown-grace", "5"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        kube = Kube(load_api_client(str(tmp_path / "kubeconfig")))
        names = [f"pg-{index}" for index in range(3)]
        for name in names:
            kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
        wait_for(lambda: all(phase_of(kube, name) == "Running" for name in names), timeout=60)
        reader = textwrap.dedent(
            """
            import django, os, sys, time
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")
            django.setup()
            from django.conf import settings
            from django.contrib.auth.models import User
            from django.test import Client
            from console import models
            assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
            deadline = time.monotonic() + 30
            while models.TrackedPod.objects.filter(phase="Running").count() < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            print("running", sorted(models.TrackedPod.objects.filter(phase="Running").values_list("name", flat=True)))
            print("nodes", list(models.VirtualNode.objects.values_list("name", flat=True)))
            User.objects.filter(username="pg-reader").delete()
            User.objects.create_user("pg-reader", password="pw-pg-reader-1", is_staff=True)
            client = Client(HTTP_HOST="127.0.0.1")
            assert client.login(username="pg-reader", password="pw-pg-reader-1")
            response = client.get("/")
            page = response.content.decode()
            tile = 'data-node="nebula-gpu"' in page
            print("dashboard", response.status_code, tile and 'data-phase="Running">Running <strong>3</strong>' in page)
            """
        )
        result = subprocess.run(
            [sys.executable, "-c", reader], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"running {names}" in result.stdout
        assert "nodes ['nebula-gpu']" in result.stdout
        assert "dashboard 200 True" in result.stdout, result.stderr[-3000:]
        assert "unused-password" not in (tmp_path / "manager.log").read_text()  # the URL's password never logged
    finally:
        manager.terminate()
        manager.wait(30)
        log.close()
        cluster.stop()
