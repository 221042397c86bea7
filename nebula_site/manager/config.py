"""`ManagerConfig`: everything the manager process runs with, built once from `runvnode`'s flags
and the NEBULA settings, frozen; and `RunnerOptions`, what every Runner of this process shares.

Built by `manage.py runvnode` (which validates); read by the rest of `nebula_site.manager`.
Holds values only: never reads settings, flags or the environment itself.
Tests: tests/nebula_site/test_manager.py, tests/vnode/kubelet/test_kubelet_auth_runvnode.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kube.client import Kube, load_api_client
from kube.operations import OperationLimits
from placement.settle import SPEND_INTERVAL
from vnode.ephemeral.budget import DEFAULT_LIMIT as DEFAULT_EPHEMERAL_OUTPUT
from vnode.kubelet import auth as kubeletauth
from vnode.kubelet.limits import Limits
from vnode.model.runs import DEFAULT_BACKOFF, BackoffPolicy
from vnode.probing.prober import DEFAULT_WORKERS as DEFAULT_PROBE_WORKERS

# In-flight work gets this long in all after SIGTERM; the Deployment's grace period is 45 s,
# which leaves time to release the Lease and stop the listeners before a SIGKILL.
SHUTDOWN_GRACE = 20.0
LEASE_DURATION = 15.0  # seconds; renewals must succeed within 2/3 of it, tried every 2/15 (client-go's 15/10/2)

Address = tuple[str, int]  # host (empty: every interface), port (0: any free one)
CertFiles = tuple[str, str]  # PEM certificate, PEM private key


@dataclass(frozen=True)
class RunnerOptions:
    """What every Runner of one process is built with (`runners.build_runner`); the provider,
    the clients, the pools, the Blocklister and the operation limits are per Runner."""

    node_ip: str | None
    kubelet_port: int
    node_dns_name: str | None = None
    poll_interval: float | None = None  # None: the provider's own
    lease_renew_interval: float = 10.0
    workers: int = 8
    backoff: BackoffPolicy = DEFAULT_BACKOFF
    probe_workers: int = DEFAULT_PROBE_WORKERS
    ephemeral_output_budget: int = DEFAULT_EPHEMERAL_OUTPUT  # bytes, for the whole process (I7)


@dataclass(frozen=True)
class KubeletAuthOptions:
    """Who may use the kubelet API, as configured (`runvnode`'s flags over NEBULA settings);
    `build` makes the listener's `auth.KubeletAuth`, with a client of the API server at
    `kubeconfig` (in-cluster when None) for TokenReview and SubjectAccessReview."""

    anonymous: bool = False
    token_auth: bool = True
    authorization: str = kubeletauth.WEBHOOK
    kubeconfig: str | None = None

    def build(self) -> kubeletauth.KubeletAuth:
        needs_api = self.token_auth or self.authorization == kubeletauth.WEBHOOK
        kube = Kube(load_api_client(self.kubeconfig, pool_size=kubeletauth.REVIEW_WORKERS)) if needs_api else None
        return kubeletauth.KubeletAuth(
            anonymous=self.anonymous, authorization=self.authorization, token_auth=self.token_auth, kube=kube
        )


@dataclass(frozen=True)
class ManagerConfig:
    """One manager process, as `runvnode` resolved it (flags over NEBULA over defaults).

    `kubeconfig` is the embedded cluster's when `dev_cluster` is set (written when it starts);
    with `dev_client_ca`, the embedded cluster's kubelet client CA is written there when it starts
    (and `kubelet_client_ca` names the same file)."""

    providers: Mapping[str, Mapping[str, Any]]  # alias -> {"BACKEND": ..., "OPTIONS": {...}}
    aliases: tuple[str, ...]  # the providers this process runs, in order
    runner: RunnerOptions  # its kubelet_port is the configured one; the bound one replaces it
    kubelet_addr: Address
    console_addr: Address
    kubelet_auth: KubeletAuthOptions = field(default_factory=KubeletAuthOptions)
    cluster_name: str | None = None  # None: the kube-system Namespace's UID
    kubeconfig: str | None = None  # None: in-cluster, then $KUBECONFIG
    dev_cluster: Address | None = None  # start the embedded API server here first
    kubelet_client_ca: str | None = None
    dev_client_ca: str | None = None
    kubelet_cert_source: str = "memory"
    kubelet_cert: CertFiles | None = None
    listener_limits: Limits = field(default_factory=Limits)
    console_tls: bool = False
    console_cert: CertFiles | None = None
    console_ca_path: str = ".nebula/console-ca.pem"
    console_optional: bool = True  # the default address in use: serve no console rather than fail
    metrics_addr: Address | None = None
    metrics_cert: CertFiles | None = None
    metrics_token_auth: bool = False
    metrics_optional: bool = False  # the built-in default address in use: warn instead of failing
    operations: Mapping[str, OperationLimits] = field(default_factory=dict)  # alias -> limits
    namespace: str = "default"
    leader_election: bool = True
    share_providers: bool = False
    lease_duration: float = LEASE_DURATION
    shutdown_grace: float = SHUTDOWN_GRACE
    spend_interval: float = SPEND_INTERVAL  # seconds between publications of the pools' moving spend figures
    demo: bool = False

    @property
    def shares(self) -> bool:
        """Whether the providers are shared out across replicas (only with leader election)."""
        return self.share_providers and self.leader_election
