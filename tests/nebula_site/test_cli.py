"""The `nebula` command's mapping onto the management commands (nebula_site.cli); the
installed command itself is tested in test_install.py."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nebula_site import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["run", "--dev-cluster", "--provider", "local"],
            ["nebula", "runvnode", "--dev-cluster", "--provider", "local"],
        ),
        (["devcluster", "--addr", "127.0.0.1:0"], ["nebula", "devcluster", "--addr", "127.0.0.1:0"]),
        (["migrate", "--noinput"], ["nebula", "migrate", "--noinput"]),
        (["fakecloud"], ["nebula", "fakecloud"]),
        (["help", "run"], ["nebula", "help", "runvnode"]),
        ([], None),
        (["--help"], None),
        (["help"], None),
    ],
)
def test_each_name_maps_onto_its_management_command(argv: list[str], expected: list[str] | None) -> None:
    assert cli.management_argv(argv) == expected


def test_no_arguments_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main([])
    assert capsys.readouterr().out == cli.USAGE


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from nebula_site.cli import main; main(sys.argv[1:])"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_other_commands_pass_through_with_the_default_settings_module() -> None:
    result = run_cli("check")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_run_takes_runvnodes_flags() -> None:
    result = run_cli("run", "--help")
    assert result.returncode == 0
    assert "--dev-cluster-addr" in result.stdout and "--console-addr" in result.stdout


def test_version_is_nebulas_from_every_entry_point() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    manage = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--version"]
    from_manage = subprocess.run(manage, cwd=ROOT, capture_output=True, text=True, timeout=60)
    for result in (run_cli("--version"), run_cli("run", "--version"), from_manage):
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"nebula {version}"


def test_usage_says_the_name_it_was_started_by() -> None:
    assert run_cli("run", "--help").stdout.startswith("usage: nebula run ")
    assert run_cli("help", "run").stdout.startswith("usage: nebula run ")
    manage = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--help"]
    assert subprocess.run(manage, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.startswith(
        "usage: manage.py runvnode "
    )


@pytest.mark.parametrize("command", ["run", "devcluster", "fakecloud", "migrate"])
def test_help_cites_no_internal_invariant_id(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert not re.search(r"\bI\d+\b", result.stdout), result.stdout
