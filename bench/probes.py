"""Benchmark: probing N Pods every second beside the poll loop: probe lag and poll tick time.

Builds a Handler over the in-process fake provider holding N running instances, tracks N
Pods with a 1 s readiness probe (tcpSocket against one loopback listener in a process of
its own, as a remote workload would be; or exec of the fake's scripted `true`, started
straight: the fake cloud's own `exec` advances every instance on each call, which would
measure the fake, O(N) per probe, not the prober), then
runs the real poll loop (`StatusSync.run`, 1 s interval) for `--seconds`, first without the
prober and then with it, and prints the poll tick time p50/p99 of each and the probe lag
(due -> started on a worker) p50/p99. No API server: a tick writes nothing here.
Usage: python bench/probes.py [--pods 1000] [--seconds 20] [--kind tcp|exec] [--workers 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from collections.abc import Sequence  # noqa: E402

from providers.base import InstanceId, PodSpec, Process, ProvisionRequest  # noqa: E402
from providers.claim import claim_name  # noqa: E402
from providers.fake import FakeProvider  # noqa: E402
from providers.fake.process import ScriptedProcess  # noqa: E402
from vnode.handler import Handler  # noqa: E402

LISTENER = """
import socket
server = socket.create_server(("127.0.0.1", 0), backlog=4096)
print(server.getsockname()[1], flush=True)
while True:
    connection, _ = server.accept()
    connection.close()
"""


WARM_UP = 2.0  # seconds of probing before the measured phase


class NoKube:
    """The API client: a quiet tick writes nothing; any call would be a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected API call {name}")


class QuickExecFake(FakeProvider):
    """The fake provider whose exec starts the scripted command at once."""

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        return ScriptedProcess(command, tty=tty, stdin=stdin)


class CountedEvents:
    def __init__(self) -> None:
        self.count = 0

    def pod(self, pod: Any, event_type: str, reason: str, message: str) -> None:
        self.count += 1


def probe_for(kind: str, port: int) -> dict[str, Any]:
    action: dict[str, Any] = {"tcpSocket": {"host": "127.0.0.1", "port": port}}
    if kind == "exec":
        action = {"exec": {"command": ["true"]}}
    return {**action, "periodSeconds": 1, "timeoutSeconds": 1}


def pod_for(index: int, uid: str, probe: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-{index}", "namespace": "bench", "uid": uid},
        "spec": {
            "nodeName": "nebula-bench",
            "containers": [{"name": "main", "image": "x", "command": ["serve"], "readinessProbe": probe}],
        },
        "status": {"phase": "Pending"},
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def run_poll_loop(handler: Handler, seconds: float) -> list[float]:
    """The real poll loop for `seconds`; the duration of each tick."""
    ticks: list[float] = []
    stop = threading.Event()
    original = handler.status_sync.poll_once

    def timed(live: Any = None) -> list[str]:
        started = time.perf_counter()
        changed = original(live)
        ticks.append(time.perf_counter() - started)
        return changed

    handler.status_sync.poll_once = timed  # type: ignore[method-assign]
    thread = threading.Thread(
        target=handler.status_sync.run,
        args=(stop,),
        kwargs={"interval": lambda: 1.0, "live_claims": lambda: None, "changed": lambda key: None},
    )
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    handler.status_sync.poll_once = original  # type: ignore[method-assign]
    return ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--kind", choices=("tcp", "exec"), default="tcp")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    listener = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True)
    assert listener.stdout is not None
    port = int(listener.stdout.readline())
    try:
        provider = QuickExecFake("bench", {"cloud": f"probes-{uuid.uuid4().hex}"})
        events = CountedEvents()
        handler = Handler(provider, kube=NoKube(), events=events, poll_interval=1.0, probe_workers=args.workers)  # type: ignore[arg-type]
        probe = probe_for(args.kind, port)
        pods = []
        for index in range(args.pods):
            uid = str(uuid.uuid4())
            spec = PodSpec(namespace="bench", name=f"web-{index}", uid=uid, container="main", image="x")
            provider.provision(spec, ProvisionRequest(claim=claim_name("bench", f"web-{index}", uid)))
            pods.append(pod_for(index, uid, probe))
        by_claim = {i.claim: i for i in provider.list()}
        for pod in pods:
            meta = pod["metadata"]
            handler.adopt(pod, by_claim[claim_name("bench", meta["name"], meta["uid"])])
            entry = handler.tracked(f"bench/{meta['name']}")
            assert entry is not None
            entry.written_status, entry.written_annotations = entry.desired_status, dict(entry.desired_annotations)
        quiet = run_poll_loop(handler, args.seconds)
        handler.prober.start()
        time.sleep(WARM_UP)  # the first probes, spread over one period as after a restart
        warm_up = list(handler.prober.stats.lags)
        handler.prober.stats.lags.clear()
        runs_before = handler.prober.stats.runs
        probing = run_poll_loop(handler, args.seconds)
        lags = list(handler.prober.stats.lags)
        runs = handler.prober.stats.runs - runs_before
        assert handler.prober.stop() == []
        ready = sum(1 for entry in handler.tracked_entries() if entry.probe_verdicts.ready.get("main"))
    finally:
        listener.kill()
        listener.wait()
    ms = 1000.0
    print(f"{args.pods} Pods, a {args.kind} readiness probe each every 1 s, {args.workers} probe workers, "
          f"{args.seconds:.0f} s per phase")  # fmt: skip
    print(f"poll tick without probes: p50 {statistics.median(quiet) * ms:.1f} ms, "
          f"p99 {percentile(quiet, 0.99) * ms:.1f} ms ({len(quiet)} ticks)")  # fmt: skip
    print(f"poll tick with probes:    p50 {statistics.median(probing) * ms:.1f} ms, "
          f"p99 {percentile(probing, 0.99) * ms:.1f} ms ({len(probing)} ticks)")  # fmt: skip
    print(f"first {WARM_UP:.0f} s after start: {len(warm_up)} probes, lag p99 {percentile(warm_up, 0.99) * ms:.1f} ms")
    print(f"probe lag (due -> started): p50 {percentile(lags, 0.5) * ms:.1f} ms, "
          f"p99 {percentile(lags, 0.99) * ms:.1f} ms, "
          f"max {max(lags) * ms:.1f} ms")  # fmt: skip
    print(f"probes run: {runs} ({runs / args.seconds:.0f}/s; due {args.pods}/s); Pods ready: {ready}/{args.pods}; "
          f"Events: {events.count}")  # fmt: skip


if __name__ == "__main__":
    main()
