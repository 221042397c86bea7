"""Benchmark: N Pods through create -> Running -> delete -> gone on the embedded cluster.

Runs the virtual kubelet in-process (one Runner, the fake provider at zero provisioning
delay) against the devcluster in its own process (`manage.py devcluster`, as a real API
server would be) over real HTTPS. Pods are bound straight to the virtual node
(spec.nodeName), so the scheduler is not measured. Prints pods/s per phase, p50/p99
latency, and the manager's API requests per Pod by verb (the bench's own requests are
told apart by user agent), and each phase's CPU seconds by process with how busy the machine's
cores were (what bounds a phase on a small machine). The creating clients and their watch run in a child process of
their own (`--clients-in-process`: in the manager's, as before 2026-12-04).
Usage: python bench/sync.py [--pods 500] [--poll 1.0] [--gated] [--serial]

--gated: the opted-in path instead. Pods carry `nebula.io/enabled` and a pool; the
devcluster calls the console's admission webhook (the Django app over real TLS in this
process), placement ungates them, the scheduler binds them. Adds "placed" timings.

--serial: the latency of one Pod. Each Pod is created, watched to Running, deleted and watched
gone before the next is created, so nothing queues behind other Pods; prints the per-Pod
create -> Running and delete -> gone p50/p99 (issue 37: within one poll, not at the next).

--provision-latency S / --terminate-latency S: every provision (terminate) call of the fake
cloud takes S seconds, as a GPU cloud's API does. --operations-concurrency, --operations-rate
and --operations-burst set the provider's operation pool (NEBULA['PROVIDER_OPERATIONS']).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kube.client import USER_AGENT, Kube, KubeError, load_api_client, path_for  # noqa: E402
from kube.operations import OperationLimits  # noqa: E402
from providers.fake import FakeProvider  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from nebula_site import gcpace  # noqa: E402
from nebula_site.manager import config as manager_config  # noqa: E402
from nebula_site.manager import runners as manager_runners  # noqa: E402

WRITE_VERBS = {"create", "update", "patch", "delete"}


def pod(name: str, gated: bool = False) -> dict[str, Any]:
    if gated:
        labels = {"nebula.io/enabled": "true", "nebula.io/pool": "bench"}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "nebula-bench",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class Watcher(threading.Thread):
    """Timestamps each Pod's first Running and its disappearance, from one watch."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.running: dict[str, float] = {}
        self.placed: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.version = ""
        self.stop = False

    def run(self) -> None:
        try:
            self._follow()
        except KubeError:
            if not self.stop:
                raise

    def _follow(self) -> None:
        while not self.stop:
            for kind, obj in self.kube.watch("/api/v1/namespaces/default/pods", resource_version=self.version):
                self.version = obj["metadata"]["resourceVersion"]
                name = obj["metadata"].get("name", "")
                if (obj.get("spec") or {}).get("nodeSelector"):
                    self.placed.setdefault(name, time.monotonic())
                if kind == "DELETED":
                    self.gone.setdefault(name, time.monotonic())
                elif (obj.get("status") or {}).get("phase") == "Running":
                    self.running.setdefault(name, time.monotonic())
                if self.stop:
                    return


def wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def start_devcluster(folder: str, *, crds: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    kubeconfig = f"{folder}/kubeconfig"
    crd_args = [arg for crd in crds for arg in ("--crd", crd)]
    process = subprocess.Popen(
        [sys.executable, "manage.py", "devcluster", "--addr", "127.0.0.1:0", "--kubeconfig", kubeconfig, *crd_args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    wait(lambda: os.path.exists(kubeconfig) and os.path.getsize(kubeconfig) > 0, 60)
    return process, kubeconfig


def request_log(kubeconfig: str) -> list[dict[str, Any]]:
    """The devcluster's request log, from its /debug/requests endpoint."""
    api = load_api_client(kubeconfig)
    context = ssl.create_default_context(cadata=open(api.configuration.ssl_ca_cert).read())
    import urllib.request

    with urllib.request.urlopen(api.configuration.host + "/debug/requests", context=context) as answer:
        records: list[dict[str, Any]] = json.load(answer)
    return records


def create_all(
    kube: Kube,
    names: list[str],
    created: dict[str, float],
    threads: int = 4,
    gated: bool = False,
    make: Callable[[str], dict[str, Any]] | None = None,
) -> None:
    """Create the Pods `names` from `threads` clients (`make(name)` builds each, default `pod`)."""

    def work(part: list[str]) -> None:
        for name in part:
            created[name] = time.monotonic()
            kube.create(path_for("pods", namespace="default"), make(name) if make else pod(name, gated))

    workers = [threading.Thread(target=work, args=(names[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def delete_all(kube: Kube, names: list[str], deleted: dict[str, float], threads: int = 4) -> None:
    def work(part: list[str]) -> None:
        for name in part:
            deleted[name] = time.monotonic()
            kube.delete(path_for("pods", namespace="default", name=name))

    workers = [threading.Thread(target=work, args=(names[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--retention", type=float, default=0.0, help="the fake's retention of terminated instances, s")
    parser.add_argument("--poll", type=float, default=1.0, help="provider poll interval, seconds")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds each phase may take")
    parser.add_argument("--provision-latency", type=float, default=0.0, help="seconds each provision call takes")
    parser.add_argument("--terminate-latency", type=float, default=0.0, help="seconds each terminate call takes")
    defaults = OperationLimits()
    parser.add_argument("--operations-concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--operations-rate", type=float, default=defaults.rate, help="operations started per second")
    parser.add_argument("--operations-burst", type=int, default=defaults.burst)
    parser.add_argument("--gated", action="store_true", help="webhook -> placement -> Running -> drained")
    parser.add_argument("--serial", action="store_true", help="one Pod at a time: create, Running, delete, gone")
    parser.add_argument(
        "--clients",
        type=int,
        default=None,
        help="concurrent creating clients (default 4; 16 with --gated: each create waits for the webhook, "
        "and a ReplicaSet controller creates in parallel bursts too)",
    )
    parser.add_argument(
        "--clients-in-process",
        action="store_true",
        help="run the creating clients and the watch in the manager's process (before 2026-12-04, the only way)",
    )
    parser.add_argument("--drive", metavar="KUBECONFIG", help=argparse.SUPPRESS)  # the child of drive_in_a_child
    parser.add_argument("--pids", default="", help=argparse.SUPPRESS)  # manager=P,devcluster=P: whose CPU to mark
    args = parser.parse_args()
    if args.clients is None:
        args.clients = 16 if args.gated else 4
    args.driver_cpu = 0.0
    if args.drive:
        pids = {label: int(pid) for label, _, pid in (p.partition("=") for p in args.pids.split(",") if p)}
        with gcpace.paced_for_a_large_heap():  # a client holding 10,000 Pods too
            phases = drive_pods(
                args.drive,
                args.pods,
                args.clients,
                gated=args.gated,
                timeout=args.timeout,
                serial=args.serial,
                pids=pids,
            )
        times = os.times()
        print(json.dumps(dict(phases, cpu=times.user + times.system)))
        return
    with tempfile.TemporaryDirectory() as folder:
        crds = (os.path.join(ROOT, "deploy/crds/nodepool.yaml"),) if args.gated else ()
        server, kubeconfig = start_devcluster(folder, crds=crds)
        args.devcluster_pid = server.pid
        try:
            with gcpace.paced_for_a_large_heap():  # the collector's pace runvnode sets for the manager
                if args.gated:
                    with GatedPath(kubeconfig) as gated:
                        run(args, kubeconfig, gated)
                else:
                    run(args, kubeconfig)
        finally:
            server.terminate()
            server.wait(30)
            times = os.times()
            print(
                f"CPU seconds: bench+manager process {times.user + times.system:.1f}, devcluster process "
                f"{times.children_user + times.children_system - args.driver_cpu:.1f}"
                + ("" if args.clients_in_process else f", driving clients' process {args.driver_cpu:.1f}")
            )


class GatedPath:
    """The opted-in path around the Runner: the console's webhook over TLS (registered with
    the devcluster), a NodePool `bench`, and placement over the one provider."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.blocklist: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._placement: Any = None

    def __enter__(self) -> GatedPath:
        import base64
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")
        django.setup()
        from django.core.wsgi import get_wsgi_application

        from devcluster import tls
        from placement.blocklist import Blocklist

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Threaded(ThreadingMixIn, WSGIServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                # wsgiref writes headers and body apart: NODELAY avoids a 40 ms delayed-ACK stall.
                import socket

                connection, address = super().get_request()
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return connection, address

        credentials = tls.make_credentials("127.0.0.1")
        self._server = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=Threaded, handler_class=Quiet)
        context = tls.server_context(credentials)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        kube = Kube(load_api_client(self.kubeconfig, user_agent="nebula-bench"))
        url = f"https://127.0.0.1:{self._server.server_address[1]}/webhooks/pods"
        hook = {
            "name": "pods.placement.nebula.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(credentials.ca_pem).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "objectSelector": {"matchLabels": {"nebula.io/enabled": "true"}},
        }
        config = {"metadata": {"name": "nebula-placement"}, "webhooks": [hook]}
        kube.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)
        pool = {
            "apiVersion": "nebula.io/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "bench"},
            "spec": {"providers": [{"name": "bench"}], "capacityTypes": ["OnDemand"]},
        }
        kube.create("/apis/nebula.io/v1alpha1/nodepools", pool)
        self.blocklist = Blocklist()
        return self

    def start_placement(self, provider: Any, workers: int) -> None:
        from placement.wiring import start_placement

        self._placement = start_placement(
            {provider.name: provider},
            kube=Kube(load_api_client(self.kubeconfig)),
            watch_kube=Kube(load_api_client(self.kubeconfig)),
            blocklist=self.blocklist,
            workers=workers,
        )

    def __exit__(self, *exc: Any) -> None:
        if self._placement is not None:
            self._placement.stop(timeout=5)
        self._server.shutdown()
        self._server.server_close()


Phases = dict[str, Any]  # start, created_all, running_all, delete_start, gone_all (monotonic), names, per-Pod times


def cpu_mark(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each process of `pids` and by this one ("clients"), and the
    machine's busy and total CPU seconds over all its cores (Linux's /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    marks: dict[str, float] = {}
    for label, pid in pids.items():
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        marks[label] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    times = os.times()
    marks["clients"] = times.user + times.system
    with open("/proc/stat") as stat:
        cpu = [int(x) for x in stat.readline().split()[1:9]]
    marks["machine_busy"], marks["machine_total"] = (sum(cpu) - cpu[3] - cpu[4]) / tick, sum(cpu) / tick
    return marks


def drive_pods(
    kubeconfig: str,
    pods: int,
    clients: int,
    *,
    gated: bool,
    timeout: float,
    serial: bool = False,
    pids: dict[str, int] | None = None,
) -> Phases:
    """The clients' side: create `pods` Pods from `clients` threads, watch them to Running,
    delete them and watch them go (`serial`: one Pod at a time, each through its whole life
    before the next). Times are CLOCK_MONOTONIC, comparable across processes."""
    bench = Kube(load_api_client(kubeconfig, user_agent="nebula-bench"))
    watcher = Watcher(Kube(load_api_client(kubeconfig, user_agent="nebula-bench")))
    watcher.start()
    time.sleep(0.3)
    names = [f"bench-{i}" for i in range(pods)]
    created: dict[str, float] = {}
    if serial:
        return drive_serially(bench, watcher, names, gated=gated, timeout=timeout)
    marks = [cpu_mark(pids or {})]
    start = time.monotonic()
    create_all(bench, names, created, threads=clients, gated=gated)
    created_all = time.monotonic()
    wait(lambda: len(watcher.running) >= pods, timeout)
    running_all = time.monotonic()
    marks.append(cpu_mark(pids or {}))
    deleted: dict[str, float] = {}
    delete_start = time.monotonic()
    delete_all(bench, names, deleted)
    deleted_all = time.monotonic()
    wait(lambda: len(watcher.gone) >= pods, timeout)
    gone_all = time.monotonic()
    marks.append(cpu_mark(pids or {}))
    watcher.stop = True
    watcher.join(1)
    return {
        "names": names, "created": created, "deleted": deleted, "start": start, "created_all": created_all,
        "running_all": running_all, "delete_start": delete_start, "deleted_all": deleted_all,
        "gone_all": gone_all, "running": watcher.running, "gone": watcher.gone, "placed": watcher.placed,
        "cpu_marks": marks,
    }  # fmt: skip


def drive_serially(bench: Kube, watcher: Watcher, names: list[str], *, gated: bool, timeout: float) -> Phases:
    """`drive_pods --serial`: each Pod created, Running, deleted and gone before the next."""
    created: dict[str, float] = {}
    deleted: dict[str, float] = {}
    start = time.monotonic()
    for name in names:
        create_all(bench, [name], created, threads=1, gated=gated)
        wait(lambda name=name: name in watcher.running, timeout)
        delete_all(bench, [name], deleted, threads=1)
        wait(lambda name=name: name in watcher.gone, timeout)
    end = time.monotonic()
    watcher.stop = True
    watcher.join(1)
    return {
        "names": names, "created": created, "deleted": deleted, "start": start, "created_all": end,
        "running_all": end, "delete_start": end, "gone_all": end, "serial": True,
        "running": watcher.running, "gone": watcher.gone, "placed": watcher.placed,
    }  # fmt: skip


def drive_in_a_child(kubeconfig: str, args: argparse.Namespace) -> Phases:
    """`drive_pods` in its own process (`--drive`), so the clients and their watch do not share
    the manager's GIL: a real cluster's clients are other processes. Its CPU is printed apart."""
    command = [sys.executable, os.path.abspath(__file__), "--drive", kubeconfig, "--pods", str(args.pods)]
    command += ["--clients", str(args.clients), "--timeout", str(args.timeout)] + (["--gated"] if args.gated else [])
    command += ["--serial"] if args.serial else []
    command += ["--pids", f"manager={os.getpid()},devcluster={args.devcluster_pid}"]
    answer = subprocess.run(command, capture_output=True, text=True, check=False)
    if answer.returncode != 0:
        raise SystemExit(f"the driving process failed: {answer.stderr[-3000:]}")
    phases: Phases = json.loads(answer.stdout.splitlines()[-1])
    args.driver_cpu = phases["cpu"]
    return phases


def run(args: argparse.Namespace, kubeconfig: str, gated: GatedPath | None = None) -> None:
    # No retention of terminated instances: the fake cloud keeps them (as EC2 does for an hour)
    # in the records every one of its calls walks, a cost of the fake, not of Nebula.
    latency = {"provision": args.provision_latency, "terminate": args.terminate_latency}
    scenario = {"retention_seconds": args.retention, "api_latency": {k: v for k, v in latency.items() if v}}
    operations = OperationLimits(args.operations_concurrency, args.operations_rate, args.operations_burst)
    provider = FakeProvider("bench", {"cloud": f"bench-{uuid.uuid4().hex}", "scenario": scenario})
    runner = manager_runners.build_runner(
        provider,
        manager_config.RunnerOptions(
            node_ip="127.0.0.1", kubelet_port=10250, poll_interval=args.poll, workers=args.workers
        ),
        kube=Kube(load_api_client(kubeconfig, pool_size=manager_runners.api_pool_size([operations], args.workers))),
        watch_kube=Kube(load_api_client(kubeconfig)),
        blocklister=gated.blocklist if gated is not None else None,
        operations=operations,
    )
    runner.start()
    wait(lambda: runner.handler.inventory.last_list_ok, 30)
    wait(lambda: runner.pods.live_claims() is not None, 30)
    if gated is not None:
        gated.start_placement(provider, args.workers)
    skip = len(request_log(kubeconfig))
    if args.clients_in_process:
        phases = drive_pods(
            kubeconfig, args.pods, args.clients, gated=gated is not None, timeout=args.timeout, serial=args.serial
        )
    else:
        phases = drive_in_a_child(kubeconfig, args)
    backlog = runner.events.backlog()
    runner.stop(timeout=5)
    names, created, deleted = phases["names"], phases["created"], phases["deleted"]
    to_running = [phases["running"][n] - created[n] for n in names]
    to_gone = [phases["gone"][n] - deleted[n] for n in names]
    ours = [r for r in request_log(kubeconfig)[skip:] if r["user_agent"].startswith(USER_AGENT)]
    by_verb = Counter(r["verb"] for r in ours)
    writes_on_pods = Counter(
        (r["verb"], r["resource"] + (f"/{r['subresource']}" if r["subresource"] else ""))
        for r in ours
        if r["verb"] in WRITE_VERBS
    )
    mode = "gated (webhook -> placement -> Running)" if gated is not None else "bound (spec.nodeName)"
    print(
        f"pods: {args.pods}, poll interval: {args.poll}s, workers: {args.workers}, "
        f"clients: {args.clients}, mode: {mode}, provision/terminate latency: "
        f"{args.provision_latency}/{args.terminate_latency}s, operations: {operations}"
    )
    if phases.get("serial"):
        print_one_pod(to_running, to_gone)
    else:
        print_batch(args, phases, created, to_running, to_gone, placed=gated is not None)
    print("manager API requests per Pod by verb:", {v: round(c / args.pods, 2) for v, c in sorted(by_verb.items())})
    total_writes = sum(c for (v, _), c in writes_on_pods.items())
    events = sum(c for (_, resource), c in writes_on_pods.items() if resource == "events")
    print(
        f"manager API writes per Pod lifecycle: {total_writes / args.pods:.2f}, "
        f"of which Events {events / args.pods:.2f}; without Events {(total_writes - events) / args.pods:.2f}"
    )
    print(f"Events still to write when the last Pod was gone: {backlog} (the recorder paces them, as a kubelet does)")
    for (verb, resource), count in sorted(writes_on_pods.items()):
        print(f"  {verb:7s} {resource:14s} {count / args.pods:.2f}/Pod")


def print_one_pod(to_running: list[float], to_gone: list[float]) -> None:
    """`--serial`: the latency of one Pod, nothing queued behind others."""
    print(
        f"one Pod at a time: create -> Running per Pod p50 {statistics.median(to_running):.3f}s "
        f"p99 {percentile(to_running, 0.99):.3f}s; delete -> gone per Pod p50 {statistics.median(to_gone):.3f}s "
        f"p99 {percentile(to_gone, 0.99):.3f}s"
    )


def print_batch(
    args: argparse.Namespace,
    phases: Phases,
    created: dict[str, float],
    to_running: list[float],
    to_gone: list[float],
    *,
    placed: bool,
) -> None:
    """All Pods at once: the time to all Running and all gone, and each Pod's own latency."""
    start, created_all, running_all = phases["start"], phases["created_all"], phases["running_all"]
    delete_start, gone_all, names = phases["delete_start"], phases["gone_all"], phases["names"]
    print(f"create requests sent in {created_all - start:.2f}s")
    if placed:
        to_placed = [phases["placed"][n] - created[n] for n in names]
        placed_all = max(phases["placed"][n] for n in names)
        print(
            f"create -> all placed:  {placed_all - start:.2f}s; "
            f"per Pod p50 {statistics.median(to_placed):.3f}s p99 {percentile(to_placed, 0.99):.3f}s"
        )
    print(
        f"create -> all Running: {running_all - start:.2f}s ({args.pods / (running_all - start):.0f} pods/s); "
        f"per Pod p50 {statistics.median(to_running):.3f}s p99 {percentile(to_running, 0.99):.3f}s"
    )
    drain = gone_all - delete_start
    print(f"delete requests sent in {phases['deleted_all'] - delete_start:.2f}s")
    print(
        f"delete -> all gone:    {drain:.2f}s ({args.pods / drain:.0f} pods/s); "
        f"per Pod p50 {statistics.median(to_gone):.3f}s p99 {percentile(to_gone, 0.99):.3f}s"
    )
    marks = phases.get("cpu_marks") or []
    for label, before, after in zip(("create -> all Running", "delete -> all gone"), marks, marks[1:], strict=False):
        spent = {k: after[k] - before[k] for k in after}
        processes = ", ".join(f"{k} {spent[k]:.1f}" for k in ("manager", "devcluster", "clients") if k in spent)
        busy = spent["machine_busy"] / spent["machine_total"] if spent["machine_total"] else 0.0
        print(
            f"CPU seconds in {label}: {processes}; the machine's {os.cpu_count()} cores {busy:.0%} busy "
            "(every process on it)"
        )


if __name__ == "__main__":
    main()
