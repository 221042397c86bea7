"""Several `manage.py runvnode --share-providers` processes on one embedded cluster and one
fake cloud (its HTTP service, so the cloud outlives every manager), and a watcher that checks
the invariants of tests/vnode/test_invariants.py all along: at no moment two live instances
for one claim (I1: nothing provisioned twice), no live Pod's instance terminated and no Pod
that ran turned Failed (nothing wrongly killed), and at the end one instance per live Pod and
none for a deleted one (nothing lost or leaked)."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from kube import names
from kube.client import Kube, NotFoundError, path_for
from kube.leases import KIND_LABEL, node_lease
from providers.claim import claim_name
from providers.fake.server import FakeCloudServer
from tests.support.rigs.process import ManagerProcess

ROOT = Path(__file__).resolve().parents[3]
LIVE = ("provisioning", "initializing", "running")  # an instance that computes (or is about to)
IDENTITY = re.compile(r"serving a share of the providers \(lease ([\w.-]+)\)")
KUBELET_PORT = re.compile(r"kubelet API on port (\d+);")


class SharedManager(ManagerProcess):
    """One replica, in the repository folder, with its own console mirror (migrated as it starts)."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, NEBULA_DB_PATH=str(log.with_suffix(".sqlite3")), **(env or {}))  # its own mirror
        super().__init__(args, cwd=ROOT, env=env, log=log)
        self.name = name
        self.identity = ""
        self.kubelet_port = 0

    def learn_identity(self) -> str | None:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()[-5000:]
        text = self.log.read_text(errors="replace")
        found, port = IDENTITY.findall(text), KUBELET_PORT.findall(text)
        self.identity = found[-1] if found else ""
        self.kubelet_port = int(port[-1]) if port else 0
        return self.identity or None


class Rig:
    """`aliases` fake providers on `cloud`; `manager(name)` starts a replica."""

    def __init__(
        self, kubeconfig: str, cloud: FakeCloudServer, tmp: Path, aliases: list[str], *, lease: int, poll: float
    ) -> None:
        self.kubeconfig, self.cloud, self.tmp, self.aliases = kubeconfig, cloud, tmp, aliases
        self.lease, self.poll = lease, poll
        entry = {"backend": "providers.fake.FakeProvider", "options": {"url": cloud.url}}
        self.providers_file = tmp / "providers.yaml"
        self.providers_file.write_text(yaml.safe_dump(dict.fromkeys(aliases, entry)))
        self.managers: list[SharedManager] = []

    def manager(self, name: str, *flags: str, env: dict[str, str] | None = None) -> SharedManager:
        args = [
            sys.executable, "manage.py", "runvnode", "--kubeconfig", self.kubeconfig,
            "--providers-file", str(self.providers_file), *(f"--provider={a}" for a in self.aliases),
            "--poll-interval", str(self.poll), "--node-ip", "127.0.0.1", "--kubelet-addr", "127.0.0.1:0",
            "--console-addr", "127.0.0.1:0", "--metrics-addr", "", "--namespace", "default",
            "--cluster-name", "sharing-tests", f"--lease-duration={self.lease}", "--shutdown-grace=5",
            "--share-providers", *flags,
        ]  # fmt: skip
        manager = SharedManager(name, args, self.tmp / f"{name}.log", env)
        manager.start()
        self.managers.append(manager)
        return manager

    def close(self) -> None:
        for manager in self.managers:
            manager.close()


def node_holders(kube: Kube, aliases: list[str]) -> dict[str, str]:
    """alias -> the identity holding its node Lease ("" when released or missing)."""
    items, _ = kube.list(path_for("leases", namespace="default", group="coordination.k8s.io"), labelSelector=KIND_LABEL)
    by_name = {i["metadata"]["name"]: str(i["spec"].get("holderIdentity") or "") for i in items}
    return {alias: by_name.get(node_lease(alias), "") for alias in aliases}


def shares(kube: Kube, aliases: list[str]) -> Counter[str]:
    """identity -> how many node Leases it holds."""
    return Counter(holder for holder in node_holders(kube, aliases).values() if holder)


def kubelet_port(kube: Kube, alias: str) -> int:
    node = kube.get(path_for("nodes", name=names.node_name(alias)))
    return int(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"])


def _claim(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return claim_name(meta["namespace"], meta["name"], meta["uid"])


class InvariantWatch:
    """Samples the cloud and the Pods every `interval` seconds on a thread; `violations` says
    what broke and when (as the sample saw it)."""

    def __init__(self, kube: Kube, cloud: FakeCloudServer, interval: float = 0.2) -> None:
        self._kube, self._cloud, self._interval = kube, cloud, interval
        self.violations: list[str] = []
        self.samples = 0
        self._ran: set[str] = set()  # Pods (by uid) seen Running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invariant watch", daemon=True)

    def __enter__(self) -> InvariantWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        # The instances first: a Pod deleted (and its instance terminated) between the two reads
        # is then gone or Terminating in the Pods read, never a live Pod with a stopped instance.
        instances = self._cloud.cloud.instances()
        pods, _ = self._kube.list(path_for("pods", namespace="default"))
        self.samples += 1
        live = Counter(str(i.get("claim")) for i in instances if i.get("state") in LIVE)
        for claim, count in live.items():
            if count > 1:
                self.violations.append(f"sample {self.samples}: {count} live instances for claim {claim}")
        stopped = {str(i.get("claim")) for i in instances if i.get("state") not in LIVE}
        for pod in pods:
            meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
            if phase == "Running":
                self._ran.add(meta["uid"])
            elif phase == "Failed" and meta["uid"] in self._ran and not meta.get("deletionTimestamp"):
                # (a Pod being deleted reads Failed with its containers' ends before it goes, as a kubelet writes it)
                self.violations.append(f"sample {self.samples}: {meta['name']} ran and is now Failed")
            claim = _claim(pod)
            if not meta.get("deletionTimestamp") and claim in stopped and claim not in live:
                self.violations.append(f"sample {self.samples}: the instance of live Pod {meta['name']} was terminated")

    def settled(self, wanted: set[str]) -> bool:
        """One live instance for each Pod in `wanted` (by name) and none for any other Pod."""
        pods, _ = self._kube.list(path_for("pods", namespace="default"))
        claims = {_claim(p) for p in pods if p["metadata"]["name"] in wanted}
        live = Counter(str(i.get("claim")) for i in self._cloud.cloud.instances() if i.get("state") in LIVE)
        return len(claims) == len(wanted) and set(live) == claims and all(n == 1 for n in live.values())


def running(kube: Kube, wanted: set[str]) -> bool:
    pods, _ = kube.list(path_for("pods", namespace="default"))
    return {p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running"} >= wanted


def delete_pod(kube: Kube, name: str) -> None:
    try:
        kube.delete(path_for("pods", namespace="default", name=name))
    except NotFoundError:
        pass
