"""`manage.py fakecloud`: serve the fake cloud over HTTP, or inject faults into a running one.

Parses arguments and calls `providers.fake.command.run_fakecloud`; nothing else lives here.
Verbs and routes are documented in docs/providers/fake.md.
Tests: tests/providers/fake/test_fake_http.py.
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from nebula_site import cli
from nebula_site.signals import stop_on_signals
from providers.fake import command as control


class Command(cli.NebulaCommand, BaseCommand):
    help = (
        "Run the fake cloud as an HTTP service (serve) or drive one (inject, faults, clear, instances, calls, reset)."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        control.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()  # `serve` runs until SIGINT or SIGTERM
        try:
            with stop_on_signals(stop):
                control.run_fakecloud(options, self.stdout, stop=stop)
        except control.ControlError as exc:
            raise CommandError(str(exc)) from exc
