"""Benchmark: one poll tick with N tracked Pods when nothing changed, and RSS per Pod.

Builds a Handler over the in-process fake provider holding N running instances, tracks N
realistic Pods (as the pod controller would after a restart: adopted, statuses written),
then times `StatusSync.poll_once()` (one provider.list() and the comparison of every Pod)
and reports the process's resident memory growth per tracked Pod. Each tick's own
`provider.list()` (as `Inventory.last_list_seconds` measured it inside the tick) is printed
apart, and Nebula's own part (the tick less its list) as its own line. No API server is
involved: a tick where nothing changed makes no API call (tests/vnode prove that).
`--profile` runs the ticks under cProfile and prints the top frames by own time. `--trace` takes
tracemalloc snapshots around the set-up and prints what the Pods and their tracking hold, by line
(its own memory makes that run's RSS figure meaningless). `--unshared` turns off the sharing of
equal status pieces (`vnode.model.shared`): the tracking as it costs when no two Pods' conditions
or start times fall in the same second. `--fresh`: every list builds new Instance objects (the
fake hands back the same object for an instance that did not change; a cloud's SDK builds new
ones), so the quiet path compares facts by value; the copying counts in the list's own time.
Usage: python bench/poll.py [--pods 10000] [--ticks 20] [--profile] [--trace] [--unshared] [--fresh]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
import tracemalloc
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from providers.base import Instance, PodSpec, ProvisionRequest  # noqa: E402
from providers.claim import claim_name  # noqa: E402
from providers.fake import FakeProvider  # noqa: E402
from vnode.handler import Handler  # noqa: E402
from vnode.model import shared  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def realistic_pod(index: int) -> dict[str, Any]:
    """A Pod as the API returns it for a bound, running workload (about 2.5 KB of JSON)."""
    name = f"worker-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "training",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "trainer", "nebula.io/enabled": "true", "pod-template-hash": "6d4f8b9c7"},
            "annotations": {"nebula.io/capacity-type": "Spot", "nebula.io/region": "us-east-1"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-6d4f8b9c7", "uid": str(uuid.uuid4())}
            ],
        },
        "spec": {
            "nodeName": "nebula-bench",
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/example/trainer:1.4.2",
                    "command": ["python", "-m", "trainer"],
                    "args": ["--epochs", "10", "--batch-size", "64"],
                    "env": [{"name": "MODE", "value": "train"}, {"name": "SEED", "value": "42"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"cpu": "32", "memory": "256Gi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "nebula.io/provider", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


class NoKube:
    """Stands in for the API client: this bench measures the poll path, which writes
    nothing when nothing changed; any call would be a bug, so it raises."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected API call {name} during a quiet poll")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="profile the ticks (cProfile), print the top frames")
    parser.add_argument("--trace", action="store_true", help="tracemalloc: what the Pods and their tracking hold")
    parser.add_argument("--unshared", action="store_true", help="no sharing of equal status pieces between Pods")
    parser.add_argument("--fresh", action="store_true", help="every list builds new Instance objects, as a cloud's SDK")
    args = parser.parse_args()
    if args.pods < 1 or args.ticks < 1:
        parser.error("--pods and --ticks must be at least 1")
    if args.unshared:
        for name in ("condition", "running", "_conditions"):
            setattr(shared, name, getattr(shared, name).__wrapped__)  # the builders without their tables
    provider = FakeProvider("bench", {"cloud": f"poll-{uuid.uuid4().hex}"})
    uids = [str(uuid.uuid4()) for _ in range(args.pods)]
    instances = []
    for index, uid in enumerate(uids):
        name = f"worker-{index}"
        spec = PodSpec(namespace="training", name=name, uid=uid, container="main", image="x")
        instances.append(provider.provision(spec, ProvisionRequest(claim=claim_name("training", name, uid))))
    by_id = {i.id: i for i in provider.list()}
    if args.fresh:
        fake_list = provider.list

        def fresh_list() -> list[Instance]:  # the copies are made inside the list's own time
            return [copy.deepcopy(instance) for instance in fake_list()]

        provider.list = fresh_list  # type: ignore[method-assign]
    handler = Handler(provider, kube=NoKube(), events=NoKube(), poll_interval=1.0)  # type: ignore[arg-type]
    gc.collect()
    snapshots = []
    if args.trace:
        tracemalloc.start()
        snapshots.append(tracemalloc.take_snapshot())
    before = rss_bytes()
    # The Pods as the pod controller's cache holds them (its memory counts too).
    pods = [realistic_pod(i) for i in range(args.pods)]
    for pod, uid in zip(pods, uids, strict=True):
        pod["metadata"]["uid"] = uid
    if args.trace:
        gc.collect()
        snapshots.append(tracemalloc.take_snapshot())
    for pod, result in zip(pods, instances, strict=True):
        handler.adopt(pod, by_id[result.instance_id])
        entry = handler.tracked(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        assert entry is not None
        entry.written_status = entry.desired_status  # as after the first flush
        entry.written_annotations.update(entry.desired_annotations)
    gc.collect()
    after = rss_bytes()
    if args.trace:
        snapshots.append(tracemalloc.take_snapshot())
        tracemalloc.stop()
        print_trace(snapshots, args.pods)
    handler.status_sync.poll_once(None)  # warm up
    inventory = handler.inventory
    profile = cProfile.Profile() if args.profile else None
    ticks, lists = [], []
    for _ in range(args.ticks):
        if profile is not None:
            profile.enable()
        started = time.perf_counter()
        changed = handler.status_sync.poll_once(None)
        ticks.append(time.perf_counter() - started)
        if profile is not None:
            profile.disable()
        lists.append(inventory.last_list_seconds)  # this tick's own provider.list()
        assert changed == [], "nothing changed, so nothing is due for a write"
    own = [tick - listed for tick, listed in zip(ticks, lists, strict=True)]
    print(f"tracked Pods: {args.pods}, ticks: {args.ticks}")
    print(f"quiet poll tick: p50 {ms(ticks)}, max {ms_max(ticks)}")
    print(f"  of which provider.list(): p50 {ms(lists)}, max {ms_max(lists)}")
    print(
        f"  of which Nebula's own part: p50 {ms(own)}, max {ms_max(own)} "
        f"({statistics.median(own) / args.pods * 1e6:.2f} us per tracked Pod)"
    )
    print(
        f"RSS growth for the Pods and their tracking: {(after - before) / args.pods / 1024:.2f} KiB per tracked Pod "
        f"(process RSS {after / 2**20:.0f} MiB)"
    )
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def print_trace(snapshots: list[tracemalloc.Snapshot], pods: int) -> None:
    """Bytes per Pod the Pods' JSON and their tracking hold after a collection, and the lines
    that allocated the tracking's (12 largest)."""
    before, with_pods, tracked = snapshots
    for what, start, end in (("the Pods' JSON", before, with_pods), ("their tracking", with_pods, tracked)):
        print(
            f"tracemalloc: {what}: {sum(s.size_diff for s in end.compare_to(start, 'filename')) / pods:.0f} B per Pod"
        )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    for stat in tracked.compare_to(with_pods, "lineno")[:12]:
        frame = stat.traceback[0]
        where = f"{frame.filename.removeprefix(root)}:{frame.lineno}"
        print(f"  {stat.size_diff / pods:6.0f} B {stat.count_diff / pods:4.1f} blocks per Pod  {where}")


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ms"


def ms_max(values: list[float]) -> str:
    return f"{max(values) * 1000:.1f} ms"


if __name__ == "__main__":
    main()
