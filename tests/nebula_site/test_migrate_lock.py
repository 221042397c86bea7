"""Two `manage.py migrate` runs at once on one PostgreSQL database take turns (the advisory lock
in `nebula_site/management/commands/migrate.py`): both exit 0 and every migration is applied
once, as the production replicas' two `migrate` init containers need on a first install. On
SQLite the command is Django's, unchanged.

Without the lock (Django's own command in place of `MIGRATE`) the first test fails most rounds:
"relation already exists" or a duplicate key, while both create django_migrations.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from django.apps import apps
from django.core.management import get_commands, load_command_class
from django.core.management.commands import migrate as django_migrate
from django.db.migrations.loader import MigrationLoader

from nebula_site.management.commands.migrate import LOCK_KEY
from tests.support.polling import wait_for
from tests.support.servers.postgres import console_database

ROOT = Path(__file__).resolve().parents[2]
MIGRATE = (sys.executable, "manage.py", "migrate", "--noinput", "--fake-initial")  # the init container's
ROUNDS = 3
WAITING = "waiting for another migrate"
# An advisory lock on a bigint shows in pg_locks as its high and low 32 bits.
WAITERS = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
    f"AND classid = {LOCK_KEY >> 32} AND objid = {LOCK_KEY & 0xFFFFFFFF} AND objsubid = 1"
)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with console_database() as url:
        yield url


def fresh_database(server_url: str, name: str) -> str:
    """An empty database `name` on the same server; its DATABASE_URL."""
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def start(env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "nebula_site.settings", **env}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=180)
    return process.returncode, stderr


def on_disk() -> set[tuple[str, str]]:
    return set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)


def model_tables() -> set[str]:
    return {model._meta.db_table for model in apps.get_models(include_auto_created=True)} | {"django_migrations"}


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as connection:
        return list(connection.execute(sql).fetchall())


def assert_migrated_once(url: str) -> None:
    recorded = [(str(app), str(name)) for app, name in rows(url, "SELECT app, name FROM django_migrations")]
    assert sorted(recorded) == sorted(on_disk())  # each once
    tables = {str(name) for (name,) in rows(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == model_tables()


@pytest.mark.slow
def test_two_migrates_at_once_on_an_empty_database_both_succeed(server_url: str) -> None:
    for round_ in range(ROUNDS):
        url = fresh_database(server_url, f"race_{round_}")
        pair = [start({"DATABASE_URL": url}, *MIGRATE) for _ in range(2)]
        results = [finish(process) for process in pair]
        assert [code for code, _ in results] == [0, 0], [stderr for _, stderr in results]
        assert_migrated_once(url)


@pytest.mark.slow
def test_migrate_waits_for_the_lock_and_says_so(server_url: str) -> None:
    url = fresh_database(server_url, "held")
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        process = start({"DATABASE_URL": url}, *MIGRATE)
        wait_for(lambda: rows(url, WAITERS) == [(1,)], timeout=60, what="migrate to wait for the lock")
        assert rows(url, "SELECT to_regclass('django_migrations')") == [(None,)]  # nothing done while it waits
    code, stderr = finish(process)  # the holder's session closed: the lock is free
    assert code == 0, stderr
    assert WAITING in stderr
    assert_migrated_once(url)


RELEASES_ON_ERROR = """
import django; django.setup()
from django.core.management import CommandError, call_command
from django.db import connection
try:
    call_command("migrate", "console", "9999_no_such_migration", interactive=False, verbosity=0)
except CommandError as exc:
    print("error:", exc)
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
    print("advisory locks held:", cursor.fetchone()[0])
"""


@pytest.mark.slow
def test_a_failed_migrate_releases_the_lock_in_its_session(server_url: str) -> None:
    url = fresh_database(server_url, "failed")
    process = start({"DATABASE_URL": url}, sys.executable, "-c", RELEASES_ON_ERROR)
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 0, stderr
    assert "error: Cannot find a migration matching" in stdout
    assert "advisory locks held: 0" in stdout


def test_migrate_is_nebulas_command_and_on_sqlite_runs_as_djangos(tmp_path: Path) -> None:
    assert get_commands()["migrate"] == "nebula_site"  # an app's command wins over django.core's
    assert isinstance(load_command_class("nebula_site", "migrate"), django_migrate.Command)
    db = tmp_path / "console.sqlite3"
    for _ in range(2):  # the second finds nothing to apply
        code, stderr = finish(start({"NEBULA_DB_PATH": str(db), "DATABASE_URL": ""}, *MIGRATE))
        assert code == 0, stderr
        assert WAITING not in stderr
    with sqlite3.connect(db) as connection:
        recorded = sorted(connection.execute("SELECT app, name FROM django_migrations"))
    assert recorded == sorted(on_disk())
