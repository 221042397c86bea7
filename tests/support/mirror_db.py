"""The console mirror's SQLite file as a kill leaves it, for the tests that prove runvnode
migrates it anyway (tests/nebula_site/test_migrate.py, tests/deploy/test_dockerfile.py).

Edits the file with sqlite3 directly; never runs Django.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def interrupt_after_commit(db: Path) -> None:
    """The state a kill leaves between the commit of authtoken's first migration and its
    record: its table exists, no later migration of it (nor the console's) was recorded."""
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM django_migrations WHERE app IN ('authtoken', 'console')")
