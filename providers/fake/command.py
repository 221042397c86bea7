"""What `manage.py fakecloud` does: serve the fake cloud, or drive a running one.

The management command adds `add_arguments` to its parser and calls `run_fakecloud`
with the parsed options; both are plain argparse and stdlib, so this module never
imports Django. Failures are `ControlError` with a message for the operator.
Tests: tests/providers/fake/test_fake_http.py.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Mapping
from typing import Any, TextIO

from providers import errors
from providers.fake.client import FakeCloudClient
from providers.fake.faults import DEFAULT_NOTICE, REFUSE_REASONS
from providers.fake.server import start_server
from providers.notices import NoticeKind

DEFAULT_ADDR = "127.0.0.1:8600"


class ControlError(Exception):
    """The command could not do what was asked; the message says why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verbs: serve, inject, faults, clear, instances, calls, reset."""
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    serve = verbs.add_parser("serve", help="run the fake cloud as an HTTP service")
    serve.add_argument("--addr", default=DEFAULT_ADDR, help=f"host:port to listen on (default {DEFAULT_ADDR})")
    serve.add_argument("--scenario", help="scenario YAML file (default: the built-in scenario)")
    serve.add_argument("--state", help="JSON file to save the state to on every change and load at start")

    inject = verbs.add_parser("inject", help="inject a fault into a running service")
    _url(inject)
    kinds = inject.add_subparsers(dest="kind", required=True, metavar="KIND")
    refuse = kinds.add_parser("refuse", help="refuse provisions")
    refuse.add_argument("--kind", dest="reason", choices=list(REFUSE_REASONS), default="capacity")
    refuse.add_argument("--accelerator", help="only this accelerator ('cpu' for CPU offerings)")
    refuse.add_argument("--tier", help="only this tier (Spot or OnDemand)")
    refuse.add_argument("--region", help="only this region")
    refuse.add_argument("--count", type=int, help="refuse this many times, then stop")
    refuse.add_argument("--seconds", type=float, help="refuse for this long")
    outage = kinds.add_parser("outage", help="every call is Unavailable")
    outage.add_argument("--seconds", type=float, help="for this long (default: until cleared)")
    slow = kinds.add_parser("slow", help="every call sleeps first")
    slow.add_argument("--delay", type=float, required=True, help="seconds each call sleeps")
    slow.add_argument("--seconds", type=float, help="for this long (default: until cleared)")
    targeted = (
        ("hide", "the next lists omit an instance (it keeps running; get sees it)"),
        ("lose", "an instance is interrupted (spot reclaim)"),
        ("exit", "an instance's workload (or with --container one container) exits"),
        ("file", "a file appears in (or with --absent leaves) a container, for scripted exec probes"),
    )
    for name, text in targeted:
        action = kinds.add_parser(name, help=text)
        target = action.add_mutually_exclusive_group(required=True)
        target.add_argument("--instance", help="instance id, e.g. fake-3")
        target.add_argument("--claim", help="claim name")
        if name == "hide":
            action.add_argument("--count", type=int, help="hide from this many lists (default 1)")
            action.add_argument("--seconds", type=float, help="hide from every list for this long")
        elif name == "lose":
            action.add_argument("--vanish", action="store_true", help="gone at once instead of TERMINATED")
        elif name == "exit":
            action.add_argument("--code", type=int, required=True, help="the exit code")
            action.add_argument("--container", help="only this container exits")
        else:
            action.add_argument("--container", help="the container (default: the first app container)")
            action.add_argument("--path", required=True, help="its absolute path, e.g. /tmp/ready")
            action.add_argument("--absent", dest="present", action="store_false", help="remove it instead")

    interrupt = kinds.add_parser(
        "interrupt", help="a notice now, the instance taken at its deadline (spot interruption)"
    )
    target = interrupt.add_mutually_exclusive_group(required=True)
    target.add_argument("--instance", help="instance id, e.g. fake-3")
    target.add_argument("--claim", help="claim name")
    target.add_argument("--count", type=int, help="this many live instances, oldest first")
    interrupt.add_argument("--tier", help="with --count: only instances of this tier (Spot or OnDemand)")
    interrupt.add_argument(
        "--notice", type=float, help=f"seconds from the notice to the deadline (default {DEFAULT_NOTICE:g})"
    )
    interrupt.add_argument(
        "--notice-kind", dest="notice_kind", choices=[k.value for k in NoticeKind], default="SpotInterruption"
    )

    _url(verbs.add_parser("faults", help="list the standing faults"))
    clear = verbs.add_parser("clear", help="clear every fault, or one with --fault")
    _url(clear)
    clear.add_argument("--fault", help="fault id, e.g. f-2")
    _url(verbs.add_parser("instances", help="list the stored instances"))
    calls = verbs.add_parser("calls", help="print the call log")
    _url(calls)
    calls.add_argument("--method", help="only calls of this method (provision, list, ...)")
    calls.add_argument("--counts", action="store_true", help="print the number of calls by method instead")
    _url(verbs.add_parser("reset", help="forget instances, faults and calls"))


def run_fakecloud(options: Mapping[str, Any], out: TextIO, *, stop: threading.Event | None = None) -> None:
    """Do the verb in `options` (as parsed by `add_arguments`); `stop` ends `serve`."""
    verb = options["verb"]
    try:
        if verb == "serve":
            _serve(options, out, stop)
            return
        client = FakeCloudClient(str(options["url"]))
        _drive(client, verb, options, out)
    except errors.ProviderError as exc:
        raise ControlError(f"{type(exc).__name__}: {exc}") from exc
    except (ValueError, OSError) as exc:
        raise ControlError(str(exc)) from exc


def _url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the service, e.g. http://127.0.0.1:8600")


def _serve(options: Mapping[str, Any], out: TextIO, stop: threading.Event | None) -> None:
    host, _, port = str(options.get("addr") or DEFAULT_ADDR).rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--addr {options.get('addr')!r} must be host:port")
    server = start_server(host or "0.0.0.0", int(port), options.get("scenario"), options.get("state"))
    try:
        out.write(f"fakecloud serving on {server.url}\n")
        out.flush()
        (stop if stop is not None else threading.Event()).wait()  # without `stop`: until the process ends
    finally:
        server.close()


def _drive(client: FakeCloudClient, verb: str, options: Mapping[str, Any], out: TextIO) -> None:
    if verb == "inject":
        fault = {k: options.get(k) for k in _FAULT_KEYS[options["kind"]] if options.get(k) is not None}
        out.write(json.dumps(client.inject({"kind": options["kind"], **fault})) + "\n")
    elif verb == "faults":
        for fault in client.faults():
            out.write(json.dumps(fault) + "\n")
    elif verb == "clear":
        out.write(f"removed {client.clear(options.get('fault'))} fault(s)\n")
    elif verb == "instances":
        out.write(f"{'ID':<12} {'STATE':<13} {'TIER':<9} {'REGION':<14} {'OWNER':<24} CLAIM\n")
        for r in client.instances():
            owner = r.get("owner") or "-"
            out.write(f"{r['id']:<12} {r['state']:<13} {r['tier']:<9} {r['region']:<14} {owner:<24} {r['claim']}\n")
    elif verb == "calls" and options.get("counts"):
        out.write(json.dumps(client.call_counts(), sort_keys=True) + "\n")
    elif verb == "calls":
        for call in client.calls(options.get("method")):
            out.write(json.dumps(call) + "\n")
    elif verb == "reset":
        client.reset()
        out.write("reset\n")
    else:
        raise ValueError(f"unknown verb {verb!r}")


_FAULT_KEYS: Mapping[str, tuple[str, ...]] = {
    "refuse": ("reason", "accelerator", "tier", "region", "count", "seconds"),
    "outage": ("seconds",),
    "slow": ("delay", "seconds"),
    "hide": ("instance", "claim", "count", "seconds"),
    "lose": ("instance", "claim", "vanish"),
    "interrupt": ("instance", "claim", "count", "tier", "notice", "notice_kind"),
    "exit": ("instance", "claim", "code", "container"),
    "file": ("instance", "claim", "container", "path", "present"),
}
