"""Soak bench (issue 38, I7): one `manage.py runvnode` (local provider, the devcluster in its own
process, the kubelet listener asking for client certificates of a CA made here), every listener
and session kind driven to its cap and past it, then closed: the manager's threads, RSS and fds.

    python bench/soak.py [--quick] [--seconds 10] [--settle 30]

Surfaces one after another: kubelet connections (anonymous raw TCP, then authenticated TLS, from
one address), exec sessions (SPDY), port-forward connections across sessions (an echo Pod),
half-sent `GET /metrics`, debug containers with large output (pods/ephemeralcontainers), console
requests over TLS (whole and half-sent), followed logs. The caps are LISTENER_LIMITS and
EPHEMERAL_OUTPUT_BUDGET given to the manager through NEBULA_* (printed); a cap the manager does
not enforce yet shows as no refusals. Clients: bench/soak_load.py, each in a child process.
Prints per surface: idle before, at the cap (the peak while held), after close (within a settle
time), refused counts, and whether after close is within 10% of idle (threads, RSS, fds).
Figures: docs/benchmarks.md "Soak (issue 38)". Smoke test: tests/bench/test_bench_soak.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")

from bench.interruptions import answers, wait  # noqa: E402
from bench.sync import start_devcluster  # noqa: E402
from kube import names  # noqa: E402
from kube.client import Kube, NotFoundError, load_api_client, path_for  # noqa: E402
from tests.support.rigs.process import ManagerProcess  # noqa: E402
from tests.support.servers import echo as echoserver  # noqa: E402
from vnode.kubelet import certs  # noqa: E402
from vnode.kubelet.limits import Limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOAD = ROOT / "bench" / "soak_load.py"
PROVIDER, NS, MIB = "local", "default", 1024 * 1024
KUBELET = re.compile(r"kubelet API on port (\d+); console (https://[\d.]+:\d+)")
METRICS = re.compile(r"metrics http://[\d.*]+:(\d+)/metrics")

# The caps, moderate so that a run takes minutes; --quick: smaller still. (LISTENER_LIMITS keys.)
CAPS = {
    "full": {
        "per_client": 64, "total": 512, "authenticated_total": 256, "head_timeout": 5.0,
        "sessions_total": 32, "forwards_total": 128, "forwards_threaded": 64, "followers_total": 96,
    },
    "quick": {
        "per_client": 16, "total": 128, "authenticated_total": 64, "head_timeout": 2.0,
        "sessions_total": 8, "forwards_total": 16, "forwards_threaded": 8, "followers_total": 12,
    },
}  # fmt: skip
BUDGET = {"full": 64 * MIB, "quick": 4 * MIB}  # EPHEMERAL_OUTPUT_BUDGET
DEBUG = {"full": (30, 10 * MIB), "quick": (3, 2 * MIB)}  # debug containers, output bytes each


class Probe:
    """The manager's threads, RSS (MiB) and open fds from /proc; `peak` while sampling."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> dict[str, float]:
        fields: dict[str, float] = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key == "Threads":
                    fields["threads"] = int(value)
                elif key == "VmRSS":
                    fields["rss"] = int(value.split()[0]) / 1024
        fields["fds"] = len(os.listdir(f"/proc/{self.pid}/fd"))
        return fields

    def start(self) -> None:
        self.peak = self.now()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="soak probe")
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            sample = self.now()
            self.peak = {k: max(v, sample[k]) for k, v in self.peak.items()}

    def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peak


def fmt(f: dict[str, float]) -> str:
    return f"threads {f['threads']:.0f}, RSS {f['rss']:.0f} MiB, fds {f['fds']:.0f}"


def near(after: dict[str, float], idle: dict[str, float]) -> list[str]:
    """The figures of `after` more than 10% over `idle` (empty: all within)."""
    return [k for k in ("threads", "rss", "fds") if after[k] > idle[k] * 1.10]


class Soak:
    """The manager and its figures; `surface` runs one surface from idle to closed."""

    def __init__(self, args: argparse.Namespace, manager: ManagerProcess, probe: Probe) -> None:
        self.args, self.manager, self.probe = args, manager, probe
        self.rows: list[tuple[str, str, dict[str, float], dict[str, float], dict[str, float], str, list[str]]] = []

    def settle(self, idle: dict[str, float]) -> dict[str, float]:
        """The figures once back within 10% of `idle`, or after --settle seconds."""
        deadline = time.monotonic() + self.args.settle
        while near(after := self.probe.now(), idle) and time.monotonic() < deadline:
            time.sleep(0.5)
        return after

    def surface(self, name: str, caps: str, load: str, options: dict[str, Any], hold: float = 0.0) -> None:
        """One surface through a child of bench/soak_load.py: idle, open (ready line), held
        --seconds at the cap (then up to `hold` more until the server closed them all), closed, settled."""
        idle = self.settle(self.probe.now()) if self.rows else self.probe.now()
        self.probe.start()
        child = subprocess.Popen(
            [sys.executable, str(LOAD), load, json.dumps(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            cwd=ROOT,
        )  # unbuffered: select() on the pipe sees every line still unread
        assert child.stdin is not None and child.stdout is not None
        notes, ready = [], ""
        while not ready.startswith("ready"):
            line = child.stdout.readline().decode()
            if not line:
                raise SystemExit(f"FAILED: the {name} clients exited ({child.wait()}) before they were ready")
            notes += [line.strip()[5:]] if line.startswith("note ") else []
            ready = line.strip()
        time.sleep(self.args.seconds)
        if hold and select.select([child.stdout], [], [], hold)[0]:  # wait for the server to close them
            notes += [child.stdout.readline().decode().strip().replace("allclosed", "all closed by the server")]
        peak = self.probe.stop()
        child.stdin.write(b"close\n")
        while not (closed := child.stdout.readline().decode().strip()).startswith("closed") and closed:
            notes.append(closed)
        child.wait(60)
        after = self.settle(idle)
        result = f"{ready[6:]}; {closed[7:]}" + "".join(f"; {n}" for n in notes)
        self.record(name, caps, idle, peak, after, result)

    def record(
        self, name: str, caps: str, idle: dict[str, float], peak: dict[str, float], after: dict[str, float], result: str
    ) -> None:
        over = near(after, idle)
        self.rows.append((name, caps, idle, peak, after, result, over))
        print(f"\n== {name} (caps: {caps})", flush=True)
        print(f"   idle before:  {fmt(idle)}\n   at the cap:   {fmt(peak)}\n   after close:  {fmt(after)}")
        print(f"   clients: {result}")
        print(f"   after close within 10% of idle: {'yes' if not over else 'no (' + ', '.join(over) + ')'}", flush=True)


def pod(name: str, command: list[str]) -> dict[str, Any]:
    spec = {
        "nodeSelector": {names.PROVIDER_KEY: PROVIDER},
        "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "main", "image": "busybox", "command": command}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def running(kube: Kube, name: str) -> bool:
    try:
        return (kube.get(path_for("pods", namespace=NS, name=name)).get("status") or {}).get("phase") == "Running"
    except NotFoundError:
        return False


def start_manager(folder: Path, kubeconfig: str, mode: str) -> tuple[ManagerProcess, Limits]:
    """`runvnode` with the local provider, the caps through NEBULA_* (validated here first)."""
    ca = certs.make_ca("soak-client-ca")
    client = certs.issue(ca, "soak-client", client=True)
    console = certs.issue(certs.make_ca("soak-console-ca"), "nebula-console", hosts=("127.0.0.1",))
    files = {"client-ca.pem": ca.cert_pem, "client.pem": client.cert_pem, "client-key.pem": client.key_pem}
    files |= {"console.pem": console.cert_pem, "console-key.pem": console.key_pem}
    for file, data in files.items():
        (folder / file).write_bytes(data)
    entry = {"backend": "providers.local.LocalProvider", "options": {"state_dir": str(folder / "state")}}
    (folder / "providers.yaml").write_text(yaml.safe_dump({PROVIDER: entry}))
    limits = Limits.from_mapping(CAPS[mode])
    flags = "--node-ip 127.0.0.1 --kubelet-addr 127.0.0.1:0 --console-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0"
    flags += f" --namespace {NS} --cluster-name bench-soak --shutdown-grace 5 --provider={PROVIDER}"
    flags += " --kubelet-authorization-mode AlwaysAllow --no-kubelet-anonymous-auth --no-kubelet-token-auth"
    paths = ["--providers-file", str(folder / "providers.yaml"), "--kubeconfig", kubeconfig]
    paths += ["--console-cert", str(folder / "console.pem"), "--console-key", str(folder / "console-key.pem")]
    paths += ["--kubelet-client-ca", str(folder / "client-ca.pem")]
    env = dict(os.environ, NEBULA_DB_PATH=str(folder / "mirror.sqlite3"))
    env |= {"NEBULA_LISTENER_LIMITS": json.dumps(CAPS[mode]), "NEBULA_EPHEMERAL_OUTPUT_BUDGET": str(BUDGET[mode])}
    manager = ManagerProcess(
        [sys.executable, "manage.py", "runvnode", *flags.split(), *paths], cwd=ROOT, env=env, log=folder / "manager.log"
    )
    manager.start()
    return manager, limits


def debug_containers(soak: Soak, kube: Kube, mode: str) -> None:
    """`count` ephemeral containers of `size` bytes of output each in one Pod, all ended; then the Pod deleted."""
    count, size = DEBUG[mode]
    path = path_for("pods", namespace=NS, name="debugged")
    idle = soak.settle(soak.probe.now())
    soak.probe.start()
    made: list[dict[str, Any]] = []
    for n in range(count):
        script = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo done {n}"
        made.append({"name": f"soak-{n}", "image": "busybox", "command": ["sh", "-c", script]})
        kube.patch(path + "/ephemeralcontainers", {"spec": {"ephemeralContainers": made}})

    def ended() -> bool:
        statuses = (kube.get(path).get("status") or {}).get("ephemeralContainerStatuses") or []
        return sum(1 for s in statuses if (s.get("state") or {}).get("terminated")) >= count

    wait(ended, 300, f"{count} debug containers ended", soak.manager, 0.5)
    events = kube.list(path_for("events", namespace=NS))[0]
    dropped = sum(1 for e in events if "EPHEMERAL_OUTPUT_BUDGET" in str(e.get("message")))
    time.sleep(soak.args.seconds)
    peak = soak.probe.stop()
    kube.request("DELETE", path, body={"gracePeriodSeconds": 0})
    wait(lambda: not answers(kube, path), 120, "the debugged Pod deleted", soak.manager, 0.5)
    after = soak.settle(idle)
    caps = f"EPHEMERAL_OUTPUT_BUDGET {BUDGET[mode] // MIB} MiB"
    result = f"{count} x {size // MIB} MiB of output ended; {dropped} Events of output dropped for the budget"
    soak.record("debug containers", caps, idle, peak, after, result)


def run(args: argparse.Namespace, folder: Path) -> list[str]:
    mode = "quick" if args.quick else "full"
    server, kubeconfig = start_devcluster(str(folder))
    manager, limits = start_manager(folder, kubeconfig, mode)
    try:
        wait(lambda: KUBELET.search(manager.log.read_text()), 120, "the manager's listeners", manager)
        wait(lambda: METRICS.search(manager.log.read_text()), 60, "the metrics listener", manager)
        text = manager.log.read_text()
        kubelet, console = int(KUBELET.findall(text)[0][0]), KUBELET.findall(text)[0][1]
        metrics = int(METRICS.findall(text)[0])
        assert manager.process is not None
        probe = Probe(manager.process.pid)
        kube = Kube(load_api_client(kubeconfig, user_agent="nebula-soak"))
        echo_port = echoserver.free_port()
        pods = {
            "sleeper": ["sleep", "3600"],
            "echo": [sys.executable, echoserver.__file__, str(echo_port)],
            "logger": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.5; done"],
            "debugged": ["sleep", "3600"],
        }
        wait(lambda: answers(kube, path_for("nodes", name=names.node_name(PROVIDER))), 120, "the node", manager)
        for name, command in pods.items():
            kube.create(path_for("pods", namespace=NS), pod(name, command))
        for name in pods:
            wait(lambda n=name: running(kube, n), 120, f"Pod {name} Running", manager, 0.2)
        time.sleep(2.0)
        print(f"manager pid {manager.process.pid}; kubelet :{kubelet}, console {console}, metrics :{metrics}")
        print(f"caps ({mode}): NEBULA_LISTENER_LIMITS={json.dumps(CAPS[mode])}, EPHEMERAL_OUTPUT_BUDGET={BUDGET[mode]}")
        print(f"idle: {fmt(probe.now())}", flush=True)
        return surfaces(
            Soak(args, manager, probe),
            kube,
            limits,
            mode,
            (kubelet, metrics, int(console.rsplit(":", 1)[1])),
            echo_port,
        )
    finally:
        manager.close()
        server.terminate()
        server.wait(30)


def surfaces(soak: Soak, kube: Kube, limits: Limits, mode: str, ports: tuple[int, int, int], echo: int) -> list[str]:
    kubelet, metrics, console = ports
    folder = soak.manager.log.parent
    cert = {"cert": str(folder / "client.pem"), "key": str(folder / "client-key.pem")}
    past = 1.5  # how far past each cap the clients go
    per, total = limits.per_client, limits.total
    conn_caps = f"per_client {per}, total {total}, head_timeout {limits.head_timeout:g}s"
    many, timed = int(per * past), limits.head_timeout * 4 + 10  # held until the head timeout closed them
    anonymous = {"port": kubelet, "count": many}
    soak.surface("kubelet connections, anonymous", conn_caps, "connections", anonymous, timed)
    auth_caps = f"{conn_caps}, authenticated_total {limits.authenticated_total}"
    authenticated = {"port": kubelet, "count": many, **cert}
    soak.surface("kubelet connections, authenticated", auth_caps, "connections", authenticated, timed)
    sessions = int(limits.sessions_total * past)
    soak.surface(
        "exec sessions (SPDY)",
        f"sessions_total {limits.sessions_total}, per_client {per}",
        "execs",
        {"port": kubelet, "count": sessions, "pod": f"{NS}/sleeper", **cert},
    )
    each = min(120, int(limits.forwards_total * past) // 3 + 1)
    soak.surface(
        "port-forward connections (3 sessions)",
        f"forwards_total {limits.forwards_total}, forwards_threaded {limits.forwards_threaded}, 128 per session",
        "forwards",
        {"port": kubelet, "sessions": 3, "each": each, "pod": f"{NS}/echo", "remote": echo, **cert},
    )
    half = 1000 if mode == "full" else 100
    halves = {"port": metrics, "count": half, "path": "/metrics"}
    soak.surface("metrics, half-sent GET /metrics", conn_caps, "metrics", halves, timed)
    debug_containers(soak, kube, mode)
    whole = per * 2
    soak.surface(
        "console requests (TLS)", conn_caps, "console", {"port": console, "count": whole, "half": per // 2}, timed
    )
    follow = int(limits.followers_total * past)
    soak.surface(
        "followed logs",
        f"followers_total {limits.followers_total}, per_client {per}",
        "followers",
        {"port": kubelet, "count": follow, "pod": f"{NS}/logger", **cert},
    )
    return [row[0] for row in soak.rows if row[6]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller caps and counts (a smoke test)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds each surface is held at its cap")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after close to get back near idle")
    args = parser.parse_args()
    if args.seconds < 0 or args.settle < 0:
        parser.error("--seconds and --settle must not be negative")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the manager and the clients inherit it
    with tempfile.TemporaryDirectory(prefix="nebula-soak-") as folder:
        over = run(args, Path(folder))
    print("\nafter close within 10% of idle: " + ("every surface" if not over else "not for " + "; ".join(over)))


if __name__ == "__main__":
    main()
