"""`manage.py migrate`: Django's own, run under a PostgreSQL advisory lock so that two at once
(the replicas' init containers, `runvnode`'s `migrate_mirror`) take turns on one database.

Django's `migrate` takes no lock: two runs on an empty database both create the tables, and one
fails ("relation already exists", a duplicate key on django_migrations). Django picks this
command over its own because `nebula_site` is an installed app, so `call_command("migrate")`
uses it too. On SQLite (one file per Pod, which locks itself) it is Django's command unchanged.
Tests: tests/nebula_site/test_migrate_lock.py.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.commands import migrate
from django.db import connections, utils
from django.db.backends.base.base import BaseDatabaseWrapper

from nebula_site import cli

log = logging.getLogger(__name__)

# Every Nebula migrate shares this key (ASCII "NebulaMG"); nothing else on the database uses it.
LOCK_KEY = 0x4E6562756C614D47


class Command(cli.NebulaCommand, migrate.Command):  # type: ignore[misc]  # Django is untyped: Any to mypy
    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            super().handle(*args, **options)
            return
        lock(connection)
        try:
            super().handle(*args, **options)
        finally:
            unlock(connection)


def lock(connection: BaseDatabaseWrapper) -> None:
    """Hold LOCK_KEY for this connection's session, waiting (and saying so) while another has it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if cursor.fetchone()[0]:
            return
        log.info("migrate: waiting for another migrate on this database to finish (advisory lock %d)", LOCK_KEY)
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])


def unlock(connection: BaseDatabaseWrapper) -> None:
    """Release LOCK_KEY (a session-level lock outlives the transactions migrate commits)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    except utils.Error:  # the session is broken or gone: closing it releases the lock
        connection.close()
