"""A throwaway PostgreSQL server for the tests that share a console database (`DATABASE_URL`).

Debian's `postgresql` (installed by `make test`), run from a temporary data folder on a free
port, as the `postgres` user when the tests run as root; one database `console`. A test
without the binaries or psycopg skips. Used by tests/console/test_postgres.py and
tests/nebula_site/test_two_replicas.py.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.polling import wait_for

BINARIES = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def postgres_database() -> Iterator[str]:
    """A running server with an empty database; yields its DATABASE_URL."""
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
        wait_for(accepting, timeout=60, what="PostgreSQL accepts connections")
        with psycopg.connect(f"postgresql://nebula@127.0.0.1:{port}/postgres", autocommit=True) as connection:
            connection.execute("CREATE DATABASE console")
        yield f"postgres://nebula:unused-password@127.0.0.1:{port}/console"
    finally:
        server.terminate()
        server.wait(30)
        server_log.close()
        shutil.rmtree(folder, ignore_errors=True)
