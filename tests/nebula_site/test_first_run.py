"""A first run that goes wrong says so in one line: no cluster to talk to, or a bad setting,
stops `runvnode` with a message naming the problem and a non-zero exit, never a traceback.
And the dev login of `--demo` exists only under `--dev-cluster`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEV_KEY = "nebula-dev-only-insecure-key"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a developer with no cluster: no kubeconfig anywhere, base settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "NEBULA_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    env.update(HOME=str(tmp_path), NEBULA_DB_PATH=str(tmp_path / "console.sqlite3"), **extra)
    return env


def runvnode(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "runvnode", "--console-addr", "127.0.0.1:0", *args],
        cwd=tmp_path,
        env=clean_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_kubeconfig_anywhere_is_one_line_naming_it_and_a_non_zero_exit(tmp_path: Path) -> None:
    result = runvnode(tmp_path, "--kubelet-addr", "127.0.0.1:0")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    named = [line for line in lines if "kubeconfig" in line]
    # Checked before anything listens: only the dev-key warning may come first; the problem is
    # the one last line.
    assert named == [lines[-1]], result.stderr
    assert "kubelet API on port" not in result.stdout
    assert lines[-1].startswith("CommandError: cannot load a kubeconfig") and "--dev-cluster" in lines[-1]
    assert "virtual nodes:" not in result.stdout  # no node was started


def test_a_named_kubeconfig_that_is_missing_is_one_line_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    result = runvnode(tmp_path, "--kubeconfig", str(missing))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if str(missing) in line]


def test_a_malformed_number_in_the_environment_is_a_check_error_naming_variable_and_value(tmp_path: Path) -> None:
    result = runvnode(tmp_path, NEBULA_POLL_INTERVAL="abc")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    named = [line for line in result.stderr.splitlines() if "nebula.E006" in line]
    assert len(named) == 1 and "NEBULA_POLL_INTERVAL='abc' is not a number" in named[0]


@pytest.fixture
def demo_on_a_cluster(cluster: DevCluster, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runvnode", "--kubeconfig", str(cluster.kubeconfig_path)]
            + ["--provider", "fake", "--demo", "--console-addr", "127.0.0.1:0", "--kubelet-addr", "127.0.0.1:0"],
            cwd=tmp_path,
            env=clean_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield process, log
        finally:
            process.terminate()
            process.wait(60)


def test_demo_on_a_real_cluster_makes_no_login_and_the_dev_key_warning_names_the_fix_not_the_key(
    demo_on_a_cluster: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    process, log = demo_on_a_cluster
    wait_for(lambda: "Nebula is running" in log.read_text(), 90, 0.1, what="the demo's instructions")
    text = log.read_text()
    assert "log in as" not in text
    with sqlite3.connect(tmp_path / "console.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM auth_user").fetchone() == (0,)
    warned = [line for line in text.splitlines() if "DJANGO_SECRET_KEY is unset" in line]
    assert len(warned) == 1 and "WARNING" in warned[0] and "set DJANGO_SECRET_KEY" in warned[0]
    assert DEV_KEY not in text
    assert process.poll() is None
