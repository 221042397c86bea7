"""The manager process's core: leader election, then one Runner per provider.

Called by `manage.py runvnode` (which builds providers and, in dev, the embedded
cluster). Blocks until `stop` is set or leadership is lost; then stops intake, lets
in-flight work finish (within one shutdown grace, under the Pod's termination grace
period) and releases the leader Lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from kube.client import Kube, load_api_client
from kube.leader import LeaderElector
from kube.worker import describe
from providers.base import Provider
from vnode.blocklister import Blocklister
from vnode.runner import Runner

logger = logging.getLogger(__name__)

LEADER_LEASE = "nebula-manager"
# In-flight work gets this long in all after SIGTERM; the Deployment's grace period is 45 s,
# which leaves time to release the Lease and stop the listeners before a SIGKILL.
SHUTDOWN_GRACE = 20.0


def run(
    providers: Mapping[str, Provider],
    *,
    kubeconfig: str | None,
    node_ip: str | None,
    kubelet_port: int,
    namespace: str,
    stop: threading.Event,
    poll_interval: float | None = None,
    leader_election: bool = True,
    lease_renew_interval: float = 10.0,
    blocklister: Blocklister | None = None,
    on_runners: Callable[[list[Runner], Kube, Kube], None] | None = None,
    on_stopping: Callable[[float], list[threading.Thread]] | None = None,
    shutdown_grace: float = SHUTDOWN_GRACE,
) -> bool:
    """Run until `stop`. Returns False if leadership was lost (the caller should exit
    non-zero so the Deployment restarts it as a standby). As leader: `on_runners` is told
    about the Runners (and the API clients) once they run, so the caller can serve their
    Handlers and start what else it wires (placement); `on_stopping(seconds)` runs first
    on the way out and returns the threads it left busy. Stopping takes at most
    `shutdown_grace` seconds: work still in flight then is abandoned (and named in the
    log); a provider call cut short is redone safely by the next leader, as claims make
    provisioning idempotent. `blocklister` receives every refusal the Handlers classify."""
    kube = Kube(load_api_client(kubeconfig))
    watch_kube = Kube(load_api_client(kubeconfig))
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    elector = LeaderElector(kube, namespace=namespace, name=LEADER_LEASE, identity=identity)
    if leader_election and not elector.acquire(stop):
        return True
    runners = [
        Runner(
            provider,
            kube=kube,
            watch_kube=watch_kube,
            node_ip=node_ip,
            kubelet_port=kubelet_port,
            poll_interval=poll_interval,
            lease_renew_interval=lease_renew_interval,
            blocklister=blocklister,
        )
        for provider in providers.values()
    ]
    for runner in runners:
        runner.start()
        logger.info("virtual node %s started", runner.handler.node_name)
    if on_runners is not None:
        on_runners(runners, kube, watch_kube)
    kept = True
    if leader_election:
        elector.keep(stop)
        kept = stop.is_set()
    else:
        stop.wait()
    logger.info("stopping: no new work; letting in-flight calls finish (at most %.0fs)", shutdown_grace)
    deadline = time.monotonic() + shutdown_grace
    busy = on_stopping(shutdown_grace) if on_stopping is not None else []
    for runner in runners:
        busy += runner.stop(max(0.0, deadline - time.monotonic()))
    if busy:
        logger.warning("stopped with work still in flight after %.0fs: %s", shutdown_grace, describe(busy))
    elector.release()
    return kept
