"""The `nebula` command of an installed Nebula (`pip install .`): the management commands
under shorter names, for use from any folder.

`nebula run ...` is `manage.py runvnode ...` (same flags), `nebula devcluster ...` is
`manage.py devcluster ...`, any other name passes through (`nebula migrate`, `nebula check`,
`nebula fakecloud`); `nebula --version` prints the installed distribution's version and
`nebula` alone prints this help. Never wires anything itself.
Tests: tests/nebula_site/test_cli.py, tests/nebula_site/test_install.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import metadata

DISTRIBUTION = "nebula"
ALIASES = {"run": "runvnode"}  # `nebula <alias>` -> `manage.py <command>`
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
    """The installed distribution's version (pyproject's `version`)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed; pip install .)"


def management_argv(argv: Sequence[str]) -> list[str] | None:
    """The argv for Django's `execute_from_command_line` (None: print the usage instead)."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    command, rest = argv[0], list(argv[1:])
    if command == "help":
        if not rest:
            return None
        return ["nebula", "help", ALIASES.get(rest[0], rest[0]), *rest[1:]]
    return ["nebula", ALIASES.get(command, command), *rest]


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] in (["--version"], ["-V"]):
        print(f"nebula {version()}")
        return
    command = management_argv(args)
    if command is None:
        print(USAGE, end="")
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(command)
