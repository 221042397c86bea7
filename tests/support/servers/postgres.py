"""A throwaway PostgreSQL server (Debian's `postgresql`, installed by `make test`) for tests that
give Nebula a `DATABASE_URL`: a fresh data folder, `fsync` off, run as the `postgres` user when
the tests run as root, its socket in the folder, TCP on `host:port` (inside a Pod network when
`network` is given: tests/support/servers/netns.py). Skips where the server is not installed.

Used by tests/deploy/test_rendered_install.py (`postgres_database`), tests/console/test_postgres.py
and tests/nebula_site/test_two_replicas.py (`console_database`); nothing here is a test.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import wait_for
from tests.support.servers.netns import PodNetwork

BINARIES = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))


@dataclass(frozen=True)
class Database:
    url: str  # what Nebula is given (TCP)
    local: str  # the same database over the server's socket file, for the test's own reads

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        psycopg = pytest.importorskip("psycopg")
        with psycopg.connect(self.local) as connection:
            return list(connection.execute(sql).fetchall())


@contextmanager
def postgres_database(name: str, *, host: str, port: int, network: PodNetwork | None = None) -> Iterator[Database]:
    """A server with an empty database `name` (its URL: postgres://nebula:...@host:port/name)."""
    if not BINARIES:
        pytest.skip("needs Debian's postgresql (apt-get install -y postgresql)")
    psycopg = pytest.importorskip("psycopg")
    bin_dir = Path(BINARIES[-1]).parent
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    folder = Path(tempfile.mkdtemp(prefix="nebula-pg-"))  # not under pytest's 0700 folders: postgres reads it
    if as_owner:
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    subprocess.run(
        [*as_owner, str(bin_dir / "initdb"), "-D", str(data), "-U", "nebula", "-A", "trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    command = [*as_owner, str(bin_dir / "postgres"), "-D", str(data), "-h", host, "-p", str(port), "-k", str(folder),
               "-c", "fsync=off", "-c", "synchronous_commit=off"]  # fmt: skip
    server_log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        network.argv(command) if network else command, stdout=subprocess.DEVNULL, stderr=server_log,
        start_new_session=True,
    )  # fmt: skip
    # The socket is a file, so this process reaches it from outside the Pod network too.
    local = f"postgresql://nebula@/postgres?host={folder}&port={port}"

    def accepting() -> bool:
        try:
            psycopg.connect(local, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    try:
        wait_for(accepting, timeout=60, what="PostgreSQL to accept connections")
        with psycopg.connect(local, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        # trust authentication: the password is what a real server would check, ignored here.
        yield Database(
            f"postgres://nebula:unused-password@{host}:{port}/{name}", local.replace("/postgres?", f"/{name}?")
        )
    finally:
        server.terminate()
        server.wait(30)
        server_log.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def console_database() -> Iterator[str]:
    """A server on a free loopback port with an empty database `console`; yields its DATABASE_URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with postgres_database("console", host="127.0.0.1", port=port) as database:
        yield database.url
