"""The console on PostgreSQL (`DATABASE_URL`): `runvnode` mirrors into a real PostgreSQL
server, and a second process, as a console on another machine would, reads the same rows
through the ORM and the dashboard.

The server is Debian's `postgresql` (installed by `make test`), run from a throwaway data
folder on a free port, as the `postgres` user when the tests run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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

ROOT = Path(__file__).resolve().parents[2]
BINARIES = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def database_url() -> Iterator[str]:
    if not BINARIES:
        pytest.skip("needs Debian's postgresql (apt-get install -y postgresql)")
    psycopg = pytest.importorskip("psycopg")
    bin_dir = Path(BINARIES[-1]).parent
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    folder = Path(tempfile.mkdtemp(prefix="nebula-pg-"))
    if as_owner:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", _free_port()
    subprocess.run(
        [*as_owner, str(bin_dir / "initdb"), "-D", str(data), "-U", "nebula", "-A", "trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    server_log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        [*as_owner, str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
         "-k", str(folder), "-c", "fsync=off", "-c", "synchronous_commit=off"],
        stdout=subprocess.DEVNULL, stderr=server_log,
    )  # fmt: skip

    def accepting() -> bool:
        try:
            psycopg.connect(f"postgresql://nebula@127.0.0.1:{port}/postgres", connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    try:
        wait_for(accepting, timeout=60)
        with psycopg.connect(f"postgresql://nebula@127.0.0.1:{port}/postgres", autocommit=True) as connection:
            connection.execute("CREATE DATABASE console")
        yield f"postgres://nebula:unused-password@127.0.0.1:{port}/console"
    finally:
        server.terminate()
        server.wait(30)
        server_log.close()
        shutil.rmtree(folder, ignore_errors=True)


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
