"""Replica failover with providers shared out: three `manage.py runvnode --share-providers`
processes, six fake providers (one fake cloud service, in this process), 1,000 Pods; SIGKILL
the replica holding the most providers and report how long until every orphaned node is
served again, and any duplicate, lost or wrongly killed instance, as the invariant watch of
`tests.support.rigs.managers` sees it (sampled every 0.5 s throughout).

"Served again" is measured three ways, from the kill: each orphaned node Lease held by a
survivor; each orphaned Node's status naming the survivor's kubelet port (its first sync);
and a Pod created on each orphaned node just after the kill Running. The issue's target is
the last within one lease duration plus one poll interval.

    python bench/failover.py [--pods 1000] [--providers 6] [--replicas 3] [--lease 15] [--poll 5]

The embedded API server runs in its own process (`manage.py devcluster`), as a real one would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")

from bench.sync import create_all, start_devcluster  # noqa: E402
from kube.client import Kube, load_api_client, path_for  # noqa: E402
from providers.fake.server import start_server  # noqa: E402
from tests.support.factories import make_pod  # noqa: E402
from tests.support.rigs.managers import InvariantWatch, Rig, kubelet_port, node_holders, running, shares  # noqa: E402


def wait(condition: object, timeout: float, what: str, interval: float = 0.05) -> float:
    """Seconds until `condition()` held; SystemExit naming `what` past `timeout`."""
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise SystemExit(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - start


def phase(kube: Kube, name: str) -> str:
    return str((kube.get(path_for("pods", namespace="default", name=name)).get("status") or {}).get("phase", ""))


def create_pods(kube: Kube, pods: list[tuple[str, str]], clients: int = 4) -> None:
    """Create the (name, alias) Pods, each on its provider's node, from `clients` threads."""
    alias_of = dict(pods)
    create_all(kube, list(alias_of), {}, threads=clients, make=lambda name: make_pod(name, alias_of[name]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--providers", type=int, default=6)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--lease", type=int, default=15, help="lease duration, seconds (runvnode's default)")
    parser.add_argument("--poll", type=float, default=5.0, help="the providers' poll interval, seconds")
    args = parser.parse_args()
    aliases = [f"p{i}" for i in range(args.providers)]
    with tempfile.TemporaryDirectory(prefix="nebula-failover-") as folder:
        server, kubeconfig = start_devcluster(folder)
        cloud = start_server()
        kube = Kube(load_api_client(kubeconfig, pool_size=8))
        rig = Rig(kubeconfig, cloud, Path(folder), aliases, lease=args.lease, poll=args.poll)
        try:
            managers = [rig.manager(f"r{i}") for i in range(args.replicas)]
            for manager in managers:
                wait(manager.learn_identity, 60, f"{manager.name} starts sharing")
            even = Counter({m.identity: args.providers // args.replicas for m in managers})
            took = wait(lambda: shares(kube, aliases) == even, 120, "the providers shared out evenly")
            print(f"shared out: {dict(Counter(shares(kube, aliases).values()))} providers per replica in {took:.1f}s")
            pods = [(f"job-{i}", aliases[i % len(aliases)]) for i in range(args.pods)]
            started = time.monotonic()
            create_pods(kube, pods)
            wanted = {name for name, _ in pods}
            took = wait(lambda: running(kube, wanted), 600, "every Pod Running", interval=0.5)
            print(f"{args.pods} Pods Running {time.monotonic() - started:.1f}s after the first create")
            with InvariantWatch(kube, cloud, interval=0.5) as watch:
                by_holder = Counter(node_holders(kube, aliases).values())
                victim = max(managers, key=lambda m: by_holder[m.identity])
                orphaned = [a for a, holder in node_holders(kube, aliases).items() if holder == victim.identity]
                survivors = [m for m in managers if m is not victim]
                port_of = {m.identity: m.kubelet_port for m in survivors}
                instances_before = {i["claim"]: i["id"] for i in cloud.cloud.instances()}
                victim.kill()
                killed = time.monotonic()
                probes = [(f"after-kill-{alias}", alias) for alias in orphaned]
                create_pods(kube, probes, clients=1)
                held = {}
                synced = {}
                serving = {}
                limit = 4 * args.lease + 120
                while len(serving) < len(orphaned) and time.monotonic() - killed < limit:
                    holders = node_holders(kube, aliases)
                    for name, alias in probes:
                        holder = holders[alias]
                        if alias not in held and holder in port_of:
                            held[alias] = time.monotonic() - killed
                        if alias not in synced and holder in port_of and kubelet_port(kube, alias) == port_of[holder]:
                            synced[alias] = time.monotonic() - killed
                        if alias not in serving and phase(kube, name) == "Running":
                            serving[alias] = time.monotonic() - killed
                    time.sleep(0.1)
                if len(serving) < len(orphaned):
                    raise SystemExit(
                        f"orphaned nodes not served within {limit:.0f}s: {sorted(set(orphaned) - set(serving))}"
                    )
                settle = wait(lambda: watch.settled(wanted | {n for n, _ in probes}), 120, "one instance per Pod", 0.5)
            instances_after = {i["claim"]: i["id"] for i in cloud.cloud.instances()}
            moved = sum(1 for claim, iid in instances_before.items() if instances_after.get(claim) != iid)
            now_held = dict(shares(kube, aliases))
            print(f"killed {victim.name} holding {len(orphaned)} of {args.providers} providers "
                  f"(lease {args.lease}s, poll {args.poll}s); the survivors hold {now_held}")  # fmt: skip
            print(f"orphaned node Leases taken over: max {max(held.values()):.1f}s after the kill")
            print(f"orphaned Nodes' status synced by the new holder: max {max(synced.values()):.1f}s")
            print(f"a Pod created on each orphaned node after the kill Running: max {max(serving.values()):.1f}s "
                  f"(target: lease + one poll = {args.lease + args.poll:.1f}s)")  # fmt: skip
            print(f"one live instance per Pod again {settle:.1f}s after that")
            print(f"invariant samples {watch.samples}: violations {len(watch.violations)}"
                  + "".join(f"\n  {v}" for v in watch.violations[:20]))  # fmt: skip
            print(f"Pods whose instance changed across the failover: {moved} of {len(instances_before)}")
        finally:
            rig.close()
            for manager in rig.managers:
                if manager.process is not None and manager.process.poll() is None:
                    manager.process.send_signal(signal.SIGKILL)
            cloud.close()
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
