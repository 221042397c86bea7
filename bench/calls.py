"""Benchmark: provider calls per deleted Pod and per restarted manager, through the real vnode.

A Runner (the manager's loops) for the fake cloud on an embedded API server in this process;
N Pods are created and Running, then: (1) the manager is restarted (a fresh Runner: cold
memory) and we count the provider calls until every Pod is adopted again; (2) every Pod is
deleted while each instance takes `--termination-delay` seconds to stop, and we count the
calls until every Pod object is gone. The fake cloud's call log counts the calls.
Usage: python bench/calls.py [--pods 100] [--termination-delay 20] [--poll 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")

from devcluster import DevCluster  # noqa: E402
from kube.client import Kube, load_api_client, path_for  # noqa: E402
from nebula_site.manager import config as manager_config  # noqa: E402
from nebula_site.manager import runners as manager_runners  # noqa: E402
from providers.fake import FakeProvider  # noqa: E402
from vnode.runner import Runner  # noqa: E402


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "nebula-bench",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
            "tolerations": [{"key": "nebula.io/provider", "operator": "Exists"}],
        },
    }


def runner_for(provider: FakeProvider, kubeconfig: str, poll: float) -> Runner:
    return manager_runners.build_runner(
        provider,
        manager_config.RunnerOptions(node_ip="127.0.0.1", kubelet_port=10250, poll_interval=poll, workers=8),
        kube=Kube(load_api_client(kubeconfig)),
        watch_kube=Kube(load_api_client(kubeconfig)),
    )


def calls(provider: FakeProvider, since: int) -> Counter[str]:
    return Counter(record.method for record in provider.cloud.call_log()[since:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--termination-delay", type=float, default=20.0, help="seconds an instance takes to stop")
    parser.add_argument("--poll", type=float, default=5.0, help="the poll interval, seconds")
    args = parser.parse_args()
    cloud = f"calls-{uuid.uuid4().hex[:8]}"
    scenario = {"termination_delay": args.termination_delay}
    with tempfile.TemporaryDirectory() as folder, DevCluster(kubeconfig_path=f"{folder}/kubeconfig"):
        kubeconfig = f"{folder}/kubeconfig"
        kube = Kube(load_api_client(kubeconfig))
        provider = FakeProvider("bench", {"cloud": cloud, "scenario": scenario})
        names = [f"calls-{i}" for i in range(args.pods)]

        def phases() -> Counter[str]:
            items, _ = kube.list(path_for("pods", namespace="default"))
            return Counter(str((p.get("status") or {}).get("phase")) for p in items)

        runner = runner_for(provider, kubeconfig, args.poll)
        runner.start()
        for name in names:
            kube.create(path_for("pods", namespace="default"), pod(name))
        wait(lambda: phases()["Running"] == args.pods, 120, "every Pod Running")
        runner.stop(timeout=10)

        mark, started = len(provider.cloud.call_log()), time.monotonic()
        runner = runner_for(FakeProvider("bench", {"cloud": cloud, "scenario": scenario}), kubeconfig, args.poll)
        runner.start()
        wait(lambda: all(runner.handler.tracked(f"default/{n}") for n in names), 120, "every Pod adopted")
        restart = calls(provider, mark)
        adopted_in = time.monotonic() - started

        mark, started = len(provider.cloud.call_log()), time.monotonic()
        for name in names:
            kube.delete(path_for("pods", namespace="default", name=name))
        wait(lambda: not kube.list(path_for("pods", namespace="default"))[0], 300, "every Pod gone")
        delete = calls(provider, mark)
        gone_in = time.monotonic() - started
        runner.stop(timeout=10)

    print(f"pods: {args.pods}, poll interval: {args.poll}s, termination delay: {args.termination_delay}s")
    print(f"restarted manager: every Pod adopted in {adopted_in:.1f}s; provider calls: {dict(restart)}")
    print(f"  per restarted manager: {sum(restart.values())} calls ({sum(restart.values()) / args.pods:.2f} per Pod)")
    print(f"deleted Pods: all gone in {gone_in:.1f}s; provider calls: {dict(delete)}")
    print(f"  per deleted Pod: {sum(delete.values()) / args.pods:.2f} calls "
          f"(terminate {delete['terminate'] / args.pods:.2f}, get {delete['get'] / args.pods:.2f}, "
          f"list {delete['list']} in all)")  # fmt: skip


if __name__ == "__main__":
    main()
