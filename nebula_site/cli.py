"""The `nebula` command of an installed Nebula (`pip install .`): the management commands
under shorter names, for use from any folder.

`nebula run ...` is `manage.py runvnode ...` (same flags), `nebula devcluster ...` is
`manage.py devcluster ...`, any other name passes through (`nebula migrate`, `nebula check`,
`nebula fakecloud`); `nebula --version` prints Nebula's version (so does `--version` of
Nebula's own commands, `version()`) and `nebula` alone prints this help. Never wires anything.
Tests: tests/nebula_site/test_cli.py, tests/nebula_site/test_install.py,
tests/nebula_site/test_cli.py::test_version_is_nebulas_from_every_entry_point.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTION = "nebula"
PROG = "nebula"  # argv[0] of the installed command: usage lines then say `nebula <alias>`
ALIASES = {"run": "runvnode"}  # `nebula <alias>` -> `manage.py <command>`
COMMANDS = {command: alias for alias, command in ALIASES.items()}
_CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
USAGE = """\
usage: nebula <command> [options]

  nebula run [...]         the manager: virtual nodes, kubelet API, console (manage.py runvnode)
  nebula devcluster [...]  the embedded Kubernetes API server alone (manage.py devcluster)
  nebula <command> [...]   any other management command: migrate, check, fakecloud, createsuperuser, ...
  nebula help [<command>]  a command's flags, e.g. `nebula help run`
  nebula --version         Nebula's version

Settings: DJANGO_SETTINGS_MODULE (default nebula_site.settings) and NEBULA_* (docs/settings.md).
Files it writes (.nebula/...) are relative to the working folder.
"""


def version() -> str:
    """Nebula's version: the checkout's pyproject `version` when this code runs from a checkout
    (`manage.py`), else the installed distribution's (the same field, built in)."""
    try:
        project = tomllib.loads(_CHECKOUT_PYPROJECT.read_text())["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        project = {}
    if project.get("name") == DISTRIBUTION and project.get("version"):
        return str(project["version"])
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def prog_of(prog_name: str, subcommand: str) -> str:
    """The `prog` of a command's usage line: `nebula run` when started as `nebula run`, else
    Django's `manage.py runvnode`."""
    program = os.path.basename(prog_name)
    if program == PROG:
        return f"{PROG} {COMMANDS.get(subcommand, subcommand)}"
    return f"{program} {subcommand}"


def management_argv(argv: Sequence[str]) -> list[str] | None:
    """The argv for Django's `execute_from_command_line` (None: print the usage instead)."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    command, rest = argv[0], list(argv[1:])
    if command == "help":
        if not rest:
            return None
        return [PROG, "help", ALIASES.get(rest[0], rest[0]), *rest[1:]]
    return [PROG, ALIASES.get(command, command), *rest]


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] in (["--version"], ["-V"]):
        print(f"{PROG} {version()}")
        return
    command = management_argv(args)
    if command is None:
        print(USAGE, end="")
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(command)


class NebulaCommand:
    """Mixed into Nebula's management commands, before Django's `BaseCommand`: their
    `--version` is Nebula's, and started as `nebula run` their usage says so."""

    def get_version(self) -> str:
        return f"{PROG} {version()}"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        parser = super().create_parser(prog_name, subcommand, **kwargs)  # type: ignore[misc]
        parser.prog = prog_of(prog_name, subcommand)
        return parser
