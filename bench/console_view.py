"""Benchmark: the console's view of the Pods other replicas serve (`console.clusterpods`) at N Pods.

Starts the embedded API server in its own process (`manage.py devcluster`, as a real one would
be), creates N realistic Pods bound to `nebula-bench` (about 2.5 KB of JSON each, env values
included) with a Running status, then in this process: the view's first list (wall and CPU of
its thread), the memory it keeps per Pod (tracemalloc, after a collection; beside it what
keeping each whole Pod dict, as `kube.reflector` does, would cost), the CPU its watch spends
per status change, its CPU while nothing changes, and one REST/mirror projection of every row.

    python bench/console_view.py [--pods 10000] [--changes 2000] [--quiet 10]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
import tracemalloc
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")

from bench.poll import realistic_pod  # noqa: E402
from bench.sync import create_all, start_devcluster  # noqa: E402
from console import rows  # noqa: E402
from console.clusterpods import ClusterView  # noqa: E402
from kube.client import Kube, load_api_client, path_for  # noqa: E402

NODE_PROVIDER = "bench"  # realistic_pod binds to nebula-bench


def running_status(index: int) -> dict[str, Any]:
    started = "2026-12-05T10:00:00Z"
    state = {"running": {"startedAt": started}}
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": index % 3, "state": state}],
    }


def bound_pod(name: str) -> dict[str, Any]:
    pod = realistic_pod(int(name.rsplit("-", 1)[1]))
    pod["metadata"]["namespace"] = "default"
    pod["metadata"].pop("uid")
    pod["metadata"].pop("resourceVersion")
    pod["metadata"]["annotations"]["nebula.io/instance-id"] = f"i-{name}"
    pod["metadata"]["annotations"]["nebula.io/endpoint"] = f"https://{name}.bench.example:8443"
    pod.pop("status")
    return pod


def patch_statuses(kube: Kube, names: list[str], *, restarts: int = 0, threads: int = 4) -> None:
    def work(part: list[str]) -> None:
        for name in part:
            status = running_status(int(name.rsplit("-", 1)[1]) + restarts)
            kube.patch(path_for("pods", namespace="default", name=name, subresource="status"), {"status": status})

    workers = [threading.Thread(target=work, args=(names[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def feed_thread_cpu() -> float:
    """CPU seconds of the view's Pod watch thread so far (/proc schedstat: nanoseconds)."""
    (thread,) = [t for t in threading.enumerate() if t.name.startswith("console feed /api/v1/pods")]
    with open(f"/proc/self/task/{thread.native_id}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout}s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--changes", type=int, default=2000, help="status changes the watch applies")
    parser.add_argument("--quiet", type=float, default=10.0, help="seconds of an idle watch to measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nebula-bench-view-") as folder:
        process, kubeconfig = start_devcluster(folder)
        try:
            run(Kube(load_api_client(kubeconfig)), Kube(load_api_client(kubeconfig)), args)
        finally:
            process.terminate()
            process.wait(30)


def run(kube: Kube, watch_kube: Kube, args: argparse.Namespace) -> None:
    names = [f"worker-{i}" for i in range(args.pods)]
    started = time.monotonic()
    create_all(kube, names, {}, make=bound_pod)
    patch_statuses(kube, names)
    print(f"{args.pods} Pods bound to nebula-{NODE_PROVIDER} with a Running status: {time.monotonic() - started:.1f} s")

    # 1. The first list and the watch's CPU (no tracing: it would slow every allocation).
    view = ClusterView(watch_kube, [NODE_PROVIDER])
    cpu, wall = time.process_time(), time.monotonic()
    view.serve_here([])
    wait(lambda: len(view.pods()) == args.pods, 300, "the first list")
    listed_wall, listed_cpu = time.monotonic() - wall, time.process_time() - cpu
    print(f"first list of {args.pods} Pods into the view: {listed_wall:.2f} s wall, {listed_cpu:.2f} s CPU in all")
    before = feed_thread_cpu()
    changed = names[: args.changes]
    patch_statuses(kube, changed, restarts=1)
    wait(
        lambda: sum(p.restarts != int(p.name.rsplit("-", 1)[1]) % 3 for p in view.pods()) == len(changed),
        300,
        "the changes seen",
    )
    spent = feed_thread_cpu() - before
    print(f"watch: {len(changed)} status changes applied, {spent * 1e6 / len(changed):.0f} µs CPU per change")
    before = feed_thread_cpu()
    time.sleep(args.quiet)
    idle = feed_thread_cpu() - before
    print(f"watch with nothing changing: {idle * 1000 / args.quiet:.2f} ms CPU per second over {args.quiet:.0f} s")
    times = []
    for _ in range(5):
        at = time.perf_counter()
        projected = rows.pod_rows([], None, view)
        times.append(time.perf_counter() - at)
    assert len(projected) == args.pods
    print(f"rows.pod_rows of {args.pods} remote Pods (one API list or mirror snapshot): {min(times) * 1000:.0f} ms")
    view.stop()
    del projected

    # 2. Memory kept: the slim view, then whole Pod dicts for comparison.
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    view = ClusterView(watch_kube, [NODE_PROVIDER])
    view.serve_here([])
    wait(lambda: len(view.pods()) == args.pods, 300, "the traced list")
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - base
    view.stop()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    whole, _ = kube.list(path_for("pods"), fieldSelector=f"spec.nodeName=nebula-{NODE_PROVIDER}")
    gc.collect()
    whole_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(
        f"memory kept by the view: {kept / args.pods:.0f} B per Pod ({kept / 2**20:.1f} MiB for {args.pods}); "
        f"whole Pod dicts would keep {whole_bytes / len(whole):.0f} B per Pod"
    )


if __name__ == "__main__":
    main()
