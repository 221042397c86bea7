"""The usage behind `/stats/summary` and `/metrics/resource`: what each tracked Pod's
instance uses (`collect`), and the kubelet's stats/v1alpha1 `Summary` built from it.

`Serving` calls `collect` on a kubelet worker thread; the provider's `UsageReporter`
samples on its own bounded schedule, so a scrape never measures anything itself. Reads
the tracked map only. The listener serves every virtual node at one address, so node
totals (`summary` of several nodes) are over every Pod of every node it serves.
Tests: tests/vnode/test_stats_summary.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube.times import rfc3339
from providers import errors
from providers.base import Provider, ResourceUsage, UsageReporter
from providers.usage import total_of
from vnode.model.tracking import Tracked, TrackedMap

logger = logging.getLogger(__name__)
JsonDict = dict[str, Any]


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    started_at: datetime | None
    usage: ResourceUsage | None


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    uid: str
    started_at: datetime | None
    containers: tuple[ContainerUsage, ...]

    def total(self) -> ResourceUsage | None:
        measured = {c.name: c.usage for c in self.containers if c.usage is not None}
        return total_of(measured) if measured and len(measured) == len(self.containers) else None


@dataclass(frozen=True)
class NodeUsage:
    """The Pods of one or more nodes, and how many could not be measured this time."""

    node_name: str
    pods: tuple[PodUsage, ...] = ()
    failed: int = 0
    started_at: datetime | None = None

    def total(self) -> ResourceUsage:
        pods = {f"{p.namespace}/{p.name}": t for p in self.pods if (t := p.total()) is not None}
        return total_of(pods) if pods else ResourceUsage()


def collect(provider: Provider, tracked: TrackedMap, *, node_name: str) -> NodeUsage:
    """Each tracked Pod with an instance, its containers' last samples where the provider
    measures them (`UsageReporter`, else `Instance.usage` as last listed)."""
    pods: list[PodUsage] = []
    failed = 0
    for entry in tracked.entries():
        if entry.instance_id is None:
            continue
        try:
            pod = _pod_usage(provider, entry)
        except errors.NotFound:
            continue  # gone since the last list: not a scrape error
        except errors.NotSupported as exc:
            logger.debug("usage of %s/%s not measured: %s", entry.namespace, entry.name, exc)
            continue  # the provider cannot measure it (docs/kubelet-api.md#metrics says where)
        except errors.ProviderError as exc:
            logger.info("usage of %s/%s not measured: %s", entry.namespace, entry.name, exc)
            failed += 1
            continue
        if pod is not None:
            pods.append(pod)
    return NodeUsage(node_name, tuple(pods), failed)


def _pod_usage(provider: Provider, entry: Tracked) -> PodUsage | None:
    assert entry.instance_id is not None
    instance = entry.last_instance
    spec = entry.pod.get("spec") or {}
    first = str(((spec.get("containers") or [{}])[0]).get("name", ""))
    started = instance.started_at if instance is not None else None
    if not isinstance(provider, UsageReporter):
        usage = instance.usage if instance is not None else None
        containers: Sequence[ContainerUsage] = [ContainerUsage(first, started, usage)]
    else:
        measured = provider.usage(entry.instance_id)
        if measured is None:
            return None  # nothing of it runs: the kubelet lists running containers only
        starts = {c.name: c.started_at for c in instance.containers} if instance is not None else {}
        containers = [
            ContainerUsage(name or first, starts.get(name, started), usage)
            for name, usage in sorted(measured.containers.items())
        ]
    return PodUsage(entry.namespace, entry.name, entry.uid, started, tuple(containers))


def merged(nodes: Iterable[NodeUsage]) -> NodeUsage:
    """Several nodes' usage as the one the shared listener reports (the first node's name)."""
    every = list(nodes)
    if not every:
        return NodeUsage("")
    pods = tuple(p for n in every for p in n.pods)
    return NodeUsage(every[0].node_name, pods, sum(n.failed for n in every))


def summary(node: NodeUsage, *, now: datetime) -> JsonDict:
    """The kubelet's stats/v1alpha1 Summary: cpu and memory per container, per Pod and for
    the node (the sum over its Pods), each stamped with when it was sampled."""
    node_json: JsonDict = {"nodeName": node.node_name, "systemContainers": []}
    if node.started_at is not None:
        node_json["startTime"] = rfc3339(node.started_at)
    node_json.update(_resources(node.total(), fallback=now))
    return {"node": node_json, "pods": [_pod(p, now=now) for p in node.pods]}


def _pod(pod: PodUsage, *, now: datetime) -> JsonDict:
    result: JsonDict = {"podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}
    if pod.started_at is not None:
        result["startTime"] = rfc3339(pod.started_at)
    containers = []
    for container in pod.containers:
        stats: JsonDict = {"name": container.name}
        if container.started_at is not None:
            stats["startTime"] = rfc3339(container.started_at)
        if container.usage is not None:
            stats.update(_resources(container.usage, fallback=now))
        containers.append(stats)
    result["containers"] = containers
    total = pod.total()
    if total is not None:
        result.update(_resources(total, fallback=now))
    return result


def _resources(usage: ResourceUsage, *, fallback: datetime) -> JsonDict:
    """The `cpu` and `memory` objects of what was measured (absent when nothing was)."""
    time = rfc3339(usage.sampled_at or fallback)
    result: JsonDict = {}
    cpu = {"usageNanoCores": usage.cpu_nano_cores, "usageCoreNanoSeconds": usage.cpu_core_nanoseconds}
    if any(v is not None for v in cpu.values()):
        result["cpu"] = {"time": time, **{k: v for k, v in cpu.items() if v is not None}}
    memory = {"usageBytes": usage.memory_bytes, "workingSetBytes": usage.memory_bytes, "rssBytes": usage.rss_bytes}
    if any(v is not None for v in memory.values()):
        result["memory"] = {"time": time, **{k: v for k, v in memory.items() if v is not None}}
    return result
