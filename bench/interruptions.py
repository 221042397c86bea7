"""Benchmark: N spot Pods of one Deployment, K interrupted at once with a notice: notice ->
each replacement Running, and whether anything was duplicated, leaked or wrongly stopped.

As deployed: the devcluster in its own process (API server, scheduler, Deployment and ReplicaSet
controllers); one `manage.py runvnode` process (leader election on: the virtual node, placement,
the console over TLS serving the placement webhook, registered as deploy/webhook does); the fake
cloud's HTTP service in this process, selling CPU Spot in us-east-1 ($0.03/h) and us-west-2
($0.04/h) and OnDemand in us-east-1 ($0.10/h). NodePool `spot`: [Spot, OnDemand], LowestPrice, so
every Pod starts on us-east-1 Spot. Once all N run, one `interrupt` fault (count K, tier Spot,
notice --notice s) takes K of them; the interrupted offering is then blocked for the pool's
interruption.blocklistTTL, so the ReplicaSet's replacements must go elsewhere.

    python bench/interruptions.py [--pods 200] [--interrupt 50] [--notice 120] [--poll 1] [--checkpoint 0]

Prints notice -> replacement Running p50/p99/max and the steps between, then the checks (0
duplicates, 0 leaks, 0 healthy Pods stopped, each interrupted Pod Failed SpotInterrupted with
DisruptionTarget and replaced once, none back on the blocked offering); exits non-zero naming
each that failed. Smoke-tested, never timed: tests/bench/test_bench_interruptions.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")

from bench.sync import percentile, start_devcluster  # noqa: E402
from kube import names  # noqa: E402
from kube.client import GoneError, Kube, KubeError, NotFoundError, load_api_client, path_for  # noqa: E402
from nebula_site.manager.devinstall import webhook_configuration  # noqa: E402
from providers.claim import claim_name  # noqa: E402
from providers.fake.server import FakeCloudServer, start_server  # noqa: E402
from tests.support.rigs.process import ManagerProcess  # noqa: E402
from vnode.kubelet import certs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROVIDER, POOL, APP, NS = "spotcloud", "spot", "spotty", "default"
EAST, WEST = "us-east-1", "us-west-2"
LIVE = ("provisioning", "initializing", "running")
NODEPOOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)
CONSOLE = re.compile(r"console (https://[\d.]+:\d+)")


def scenario(args: argparse.Namespace) -> dict[str, Any]:
    cpu = {"accelerator": None, "gpu_count": 0, "provisioning_delay": args.boot}
    trap = {"workload": {"sigterm": {"seconds": args.checkpoint, "exit_code": 0}}} if args.checkpoint else {}
    return {
        **trap,
        "poll_interval": args.poll,
        "regions": {"us": [EAST, WEST]},
        "offerings": [
            {**cpu, "tier": "Spot", "region": EAST, "hourly_price": 0.03},
            {**cpu, "tier": "Spot", "region": WEST, "hourly_price": 0.04},
            {**cpu, "tier": "OnDemand", "region": EAST, "hourly_price": 0.10},
        ],
    }


def nodepool(args: argparse.Namespace) -> dict[str, Any]:
    spec = {
        "providers": [{"name": PROVIDER, "regions": ["us"]}],
        "capacityTypes": ["Spot", "OnDemand"],
        "strategy": "LowestPrice",
        "interruption": {"blocklistTTL": args.ttl},
    }
    kind = {"apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}", "kind": names.NODEPOOL_KIND}
    return {**kind, "metadata": {"name": POOL}, "spec": spec}


def deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": APP, names.ENABLED_LABEL: "true", names.POOL_LABEL: POOL}
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": APP}}, "template": template}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": NS}, "spec": spec}


def claim_of(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return claim_name(meta["namespace"], meta["name"], meta["uid"])


def disrupted(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions)


class Watch(threading.Thread):
    """Every Pod of the namespace by uid: when (wall clock) it was first seen, placed, Running,
    DisruptionTarget, Failed, deleted; its last object; and what happened to a Pod after it ran
    (a phase other than Running, a deletion, a DisruptionTarget), for the healthy-Pod check."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True, name="bench watch")
        self.kube, self.stop = kube, threading.Event()
        self.seen: dict[str, dict[str, float]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self.after_running: dict[str, list[str]] = {}

    def run(self) -> None:
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    items, version = self.kube.list(path_for("pods", namespace=NS))
                    for pod in items:
                        self.note("ADDED", pod)
                for kind, pod in self.kube.watch(path_for("pods", namespace=NS), resource_version=version):
                    version = (pod.get("metadata") or {}).get("resourceVersion") or version
                    if kind in ("ADDED", "MODIFIED", "DELETED") and pod["metadata"].get("uid"):
                        self.note(kind, pod)  # (a BOOKMARK carries only its resourceVersion)
                    if self.stop.is_set():
                        return
            except GoneError:
                version = ""
            except KubeError:
                if self.stop.wait(0.2):
                    return

    def note(self, kind: str, pod: dict[str, Any]) -> None:
        now, uid = time.time(), pod["metadata"]["uid"]
        times = self.seen.setdefault(uid, {"created": now})
        self.last[uid] = pod
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        if spec.get("nodeName") or names.PLACEMENT_GATE not in gates:
            times.setdefault("placed", now)
        ended = kind == "DELETED" or pod["metadata"].get("deletionTimestamp")
        if "running" in times and (status.get("phase") != "Running" or ended or disrupted(pod)):
            self.after_running.setdefault(uid, []).append(f"{kind} phase={status.get('phase')} at {now:.2f}")
        if status.get("phase") == "Running":
            times.setdefault("running", now)
        if disrupted(pod):
            times.setdefault("disrupted", now)
        if status.get("phase") == "Failed":
            times.setdefault("failed", now)
        if kind == "DELETED":
            times.setdefault("deleted", now)

    def running(self) -> dict[str, dict[str, Any]]:
        """uid -> last object of each Pod Running, not deleted or being deleted."""
        last = list(self.last.items())
        return {u: p for u, p in last if (p.get("status") or {}).get("phase") == "Running" and self.live(u)}

    def live(self, uid: str) -> bool:
        return "deleted" not in self.seen[uid] and not self.last[uid]["metadata"].get("deletionTimestamp")


class Sampler(threading.Thread):
    """The cloud every 0.25 s: the most live instances of one claim, and in all."""

    def __init__(self, cloud: FakeCloudServer) -> None:
        super().__init__(daemon=True, name="bench sampler")
        self.cloud, self.stop = cloud, threading.Event()
        self.samples, self.most_per_claim, self.most_live = 0, 0, 0

    def run(self) -> None:
        while not self.stop.wait(0.25):
            live = Counter(str(i.get("claim")) for i in self.cloud.cloud.instances() if i.get("state") in LIVE)
            self.samples += 1
            self.most_per_claim = max(self.most_per_claim, max(live.values(), default=0))
            self.most_live = max(self.most_live, sum(live.values()))


def wait(condition: Any, timeout: float, what: str, manager: ManagerProcess, interval: float = 0.1) -> float:
    start = time.monotonic()
    while not condition():
        if manager.process is not None and manager.process.poll() is not None:
            raise SystemExit(
                f"FAILED: the manager exited ({manager.process.returncode}) while waiting for {what}:\n"
                + manager.log.read_text(errors="replace")[-4000:]
            )
        if time.monotonic() - start > timeout:
            raise SystemExit(f"FAILED: {what}: not within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - start


def start_manager(folder: Path, kubeconfig: str, cloud: FakeCloudServer, poll: float) -> ManagerProcess:
    """`manage.py runvnode` over the fake cloud's service, its console over TLS (a CA made here)."""
    ca = certs.make_ca("bench-console-ca")
    pair = certs.issue(ca, "nebula-console", hosts=("127.0.0.1",))
    (folder / "ca.pem").write_bytes(ca.cert_pem)
    (folder / "console.pem").write_bytes(pair.cert_pem)
    (folder / "console-key.pem").write_bytes(pair.key_pem)
    entry = {"backend": "providers.fake.FakeProvider", "options": {"url": cloud.url}}
    (folder / "providers.yaml").write_text(yaml.safe_dump({PROVIDER: entry}))
    flags = f"--node-ip 127.0.0.1 --kubelet-addr 127.0.0.1:0 --console-addr 127.0.0.1:0 --namespace {NS}"
    flags += f" --cluster-name bench-interruptions --shutdown-grace 5 --poll-interval {poll} --provider={PROVIDER}"
    files = ["--providers-file", str(folder / "providers.yaml"), "--kubeconfig", kubeconfig, "--metrics-addr="]
    files += ["--console-cert", str(folder / "console.pem"), "--console-key", str(folder / "console-key.pem")]
    args = [sys.executable, "manage.py", "runvnode", *flags.split(), *files]
    env = dict(os.environ, NEBULA_DB_PATH=str(folder / "mirror.sqlite3"))
    manager = ManagerProcess(args, cwd=ROOT, env=env, log=folder / "manager.log")
    manager.start()
    return manager


def interrupt(cloud: FakeCloudServer, count: int, notice: float) -> list[str]:
    """One `interrupt` fault through the service's control route, as `fakecloud inject` sends it."""
    body = json.dumps({"kind": "interrupt", "count": count, "tier": "Spot", "notice": notice}).encode()
    request = urllib.request.Request(cloud.url + "/v1/faults", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return list(json.load(answer)["fault"]["instances"])


def figures(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {percentile(values, 0.5):.1f}s, p99 {percentile(values, 0.99):.1f}s, max {max(values):.1f}s"


def where(pod: dict[str, Any]) -> tuple[str, str]:
    notes = pod["metadata"].get("annotations") or {}
    return str(notes.get(names.CAPACITY_TYPE_ANNOTATION)), str(notes.get(names.REGION_ANNOTATION))


def run(args: argparse.Namespace, folder: Path) -> list[str]:
    """The whole run; returns the failed checks (empty: all held)."""
    server, kubeconfig = start_devcluster(str(folder), crds=(str(ROOT / "deploy/crds/nodepool.yaml"),))
    cloud = start_server(scenario=scenario(args))
    manager = start_manager(folder, kubeconfig, cloud, args.poll)
    kube = Kube(load_api_client(kubeconfig, user_agent="nebula-bench"))
    watch, sampler = Watch(Kube(load_api_client(kubeconfig, user_agent="nebula-bench"))), Sampler(cloud)
    try:
        wait(lambda: CONSOLE.search(manager.log.read_text()), 120, "the manager's console listening", manager)
        url = CONSOLE.findall(manager.log.read_text())[0]
        hook = webhook_configuration(url, (folder / "ca.pem").read_bytes())
        kube.create(path_for("mutatingwebhookconfigurations", group="admissionregistration.k8s.io"), hook)
        wait(lambda: answers(kube, NODEPOOLS), 60, "the NodePool CRD served", manager)
        kube.create(NODEPOOLS, nodepool(args))
        node = path_for("nodes", name=names.node_name(PROVIDER))
        wait(lambda: answers(kube, node), 120, "the virtual node registered", manager)
        watch.start()
        started = time.monotonic()
        kube.create(path_for("deployments", namespace=NS, group="apps"), deployment(args.pods))
        wait(lambda: len(watch.running()) >= args.pods, args.timeout, f"{args.pods} Pods Running", manager, 0.2)
        print(f"{args.pods} Pods Running {time.monotonic() - started:.1f}s after the Deployment's create", flush=True)
        originals = watch.running()
        tiers = Counter(where(p) for p in originals.values())
        print(f"placed on: {dict(tiers)}", flush=True)
        if tiers != {("Spot", EAST): args.pods}:
            raise SystemExit(f"FAILED: not every Pod on Spot {EAST} before the interruption: {dict(tiers)}")
        instance_of = {str(i["claim"]): str(i["id"]) for i in cloud.cloud.instances() if i.get("state") in LIVE}
        sampler.start()
        issued = time.time()
        taken = interrupt(cloud, args.interrupt, args.notice)
        by_instance = {instance_of.get(claim_of(p)): u for u, p in originals.items()}
        hit = {by_instance[i] for i in taken if i in by_instance}
        print(f"interrupted {len(taken)} instances at once (tier Spot, notice {args.notice:g}s)", flush=True)

        def replaced() -> bool:
            new = [u for u, p in watch.running().items() if u not in originals]
            return len(new) >= len(hit) and all("failed" in watch.seen[u] for u in hit)

        took = wait(replaced, args.timeout, f"{len(hit)} replacements Running", manager, 0.2)
        print(f"all {len(hit)} replacements Running {took:.1f}s after the notice; {args.settle:g}s more", flush=True)
        time.sleep(args.settle)  # anything more (a second replacement, a late stop) shows up in the checks
        return report(args, watch, sampler, cloud, originals, hit, set(taken), instance_of, issued)
    finally:
        sampler.stop.set()
        watch.stop.set()
        manager.close()
        cloud.close()
        server.terminate()
        server.wait(30)


def answers(kube: Kube, path: str) -> bool:
    try:
        return bool(kube.request("GET", path))
    except NotFoundError:
        return False


def report(
    args: argparse.Namespace,
    watch: Watch,
    sampler: Sampler,
    cloud: FakeCloudServer,
    originals: dict[str, Any],
    hit: set[str],
    taken: set[str],
    instance_of: dict[str, str],
    issued: float,
) -> list[str]:
    failed: list[str] = []
    seen = dict(watch.seen)
    new = {u: t for u, t in seen.items() if u not in originals}
    replacements = [t["running"] - issued for t in new.values() if "running" in t]
    print(f"notice -> replacement Running ({len(replacements)} Pods): {figures(replacements)}")
    steps = [("DisruptionTarget", "disrupted", hit), ("Failed", "failed", hit), ("deleted", "deleted", hit)]
    steps += [("replacement created", "created", set(new)), ("replacement placed", "placed", set(new))]
    for step, key, pods in steps:
        print(f"  notice -> {step}: {figures([seen[u][key] - issued for u in pods if key in seen[u]])}")
    # Duplicates: one live instance per claim, never more than N + K live, one replacement per interruption.
    most, limit = sampler.most_live, args.pods + len(hit)
    print(
        f"{sampler.samples} cloud samples: live instances of one claim at most {sampler.most_per_claim}, "
        f"in all at most {most} (limit {limit}); {len(new)} Pods created for {len(hit)} interrupted"
    )
    if sampler.most_per_claim > 1 or most > limit or len({len(new), len(hit), len(taken), args.interrupt}) > 1:
        failed.append(
            f"duplicates: {sampler.most_per_claim} live instances of one claim, {most} in all, "
            f"{len(new)} Pods created for {len(hit)} interrupted ({len(taken)} instances taken)"
        )
    # Leaks: every live instance claimed by a Running Pod, and the other way round; the interrupted terminated.
    records = cloud.cloud.instances()
    live = {str(i["claim"]) for i in records if i.get("state") in LIVE}
    claims = {claim_of(p) for p in watch.running().values()}
    ended = {str(i["id"]): i for i in records if str(i["id"]) in taken}
    on = sorted(i for i in taken if ended.get(i, {}).get("state") != "terminated")
    late = sum(1 for r in ended.values() if r.get("preempted"))
    acked = len({r.args for r in cloud.cloud.call_log("ack") if r.outcome == "ok"})  # each notice's first ack
    print(
        f"leaks: {len(live - claims)} live instances of no Running Pod, {len(claims - live)} Running Pods without "
        f"one; interrupted instances terminated {len(taken) - len(on)}/{len(taken)} ({late} at the deadline); "
        f"notices acknowledged {acked}/{len(taken)}"
    )
    if live != claims or on or acked != len(taken):
        failed.append(
            f"leaks: {sorted(live - claims)[:5]} unclaimed, {sorted(claims - live)[:5]} without, {on[:5]} "
            f"on, {acked}/{len(taken)} notices acknowledged"
        )
    # Healthy Pods: the same uid, Running throughout, their instances never stopped nor terminated.
    healthy = set(originals) - hit
    touched = {u: watch.after_running[u] for u in healthy if u in watch.after_running}
    gone = healthy - set(watch.running())
    calls = [r.args + " " for m in ("stop_container", "terminate") for r in cloud.cloud.call_log(m)]
    ids = {instance_of.get(claim_of(originals[u]), "") for u in healthy}
    stopped = sorted(i for i in ids if any(f"id={i} " in a for a in calls))
    print(
        f"healthy Pods: {len(healthy - set(touched) - gone)}/{len(healthy)} Running throughout with their uid; "
        f"{len(stopped)} of their instances stopped or terminated"
    )
    if touched or gone or stopped:
        failed.append(f"healthy Pods failed: {list(touched.items())[:3]}; {len(gone)} gone; stopped {stopped[:5]}")
    # How each interrupted Pod ended (its last object), and where the replacements went.
    ends: Counter[tuple[Any, ...]] = Counter()
    for pod in (watch.last[u] for u in hit):
        status, notes = pod.get("status") or {}, pod["metadata"].get("annotations") or {}
        ends[(status.get("phase"), status.get("reason"), disrupted(pod), names.INTERRUPTION_ANNOTATION in notes)] += 1
    good = ends[("Failed", names.REASON_SPOT_INTERRUPTED, True, True)]
    print(
        f"interrupted Pods Failed, reason {names.REASON_SPOT_INTERRUPTED}, DisruptionTarget, the notice recorded: "
        f"{good}/{len(hit)}" + ("" if good == len(hit) else f" (phase, reason, DisruptionTarget, record: {ends})")
    )
    if good != len(hit):
        failed.append(f"interrupted Pods ended otherwise: {dict(ends)}")
    went = Counter(where(watch.last[u]) for u in new)
    print("replacements placed on: " + ", ".join(f"{t} {r}: {n}" for (t, r), n in sorted(went.items())))
    if went[("Spot", EAST)]:
        failed.append(f"{went[('Spot', EAST)]} replacements went back to the interrupted offering (Spot {EAST})")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=200, help="replicas of the Deployment")
    parser.add_argument("--interrupt", type=int, default=50, help="instances interrupted at once")
    parser.add_argument("--notice", type=float, default=120.0, help="the notice window, seconds")
    parser.add_argument("--poll", type=float, default=1.0, help="the provider's poll interval, seconds")
    parser.add_argument("--checkpoint", type=float, default=0.0, help="seconds the workload works after SIGTERM")
    parser.add_argument("--boot", type=float, default=0.0, help="each offering's provisioning delay, seconds")
    parser.add_argument("--ttl", default="10m", help="the pool's interruption.blocklistTTL")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds watched after the last replacement")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each phase may take")
    args = parser.parse_args()
    if not 0 < args.interrupt <= args.pods:
        parser.error("--interrupt must be between 1 and --pods")
    print(
        f"pods: {args.pods}, interrupted: {args.interrupt}, notice {args.notice:g}s, poll {args.poll:g}s, "
        f"pool {POOL}: [Spot, OnDemand] LowestPrice, blocklistTTL {args.ttl}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="nebula-interruptions-") as folder:
        failed = run(args, Path(folder))
    if failed:
        print("FAILED: " + "; ".join(failed))
        raise SystemExit(1)
    print("all checks held: 0 duplicates, 0 leaks, 0 healthy Pods failed")


if __name__ == "__main__":
    main()
