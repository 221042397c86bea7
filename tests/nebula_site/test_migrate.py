"""The console mirror's migration survives a manager killed in the middle of it.

Django records a migration with deferred SQL (indexes, foreign keys) only after its
transaction commits; a kill in between leaves tables that no record explains, and a plain
`migrate` then fails on every start. Seen for real: a manager SIGKILLed during its first
start could never start again ("table authtoken_token already exists").
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.mirror_db import interrupt_after_commit

ROOT = Path(__file__).resolve().parents[2]
MIGRATE_MIRROR = (
    "import django; django.setup(); from nebula_site.manager.startup import migrate_mirror; migrate_mirror()"
)


def run(db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NEBULA_DB_PATH=str(db), DJANGO_SETTINGS_MODULE="nebula_site.settings")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def applied(db: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(db) as connection:
        return set(connection.execute("SELECT app, name FROM django_migrations"))


def test_runvnode_migrates_a_mirror_left_by_a_kill_between_commit_and_record(tmp_path: Path) -> None:
    db = tmp_path / "console.sqlite3"
    first = run(db, sys.executable, "manage.py", "migrate", "--noinput")
    assert first.returncode == 0, first.stderr
    complete = applied(db)
    interrupt_after_commit(db)
    plain = run(db, sys.executable, "manage.py", "migrate", "--noinput")
    assert plain.returncode != 0 and "already exists" in plain.stderr  # the failure this guards against
    fixed = run(db, sys.executable, "-c", MIGRATE_MIRROR)
    assert fixed.returncode == 0, fixed.stderr
    assert applied(db) == complete


def test_runvnode_migrates_a_fresh_mirror(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "console.sqlite3"  # its folder is made too
    result = run(db, sys.executable, "-c", MIGRATE_MIRROR)
    assert result.returncode == 0, result.stderr
    assert ("console", "0001_initial") in applied(db)
