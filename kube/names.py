"""Every name Nebula writes into the cluster: labels, annotations, taints, Event reasons.

One module so that the vnode, placement, the console and the manifests agree. Pure
constants and two naming functions; imports nothing from the rest of Nebula.
Tests: tests/deploy/test_rbac_proof.py.
"""

from __future__ import annotations

PREFIX = "nebula.io"

# Pod opt-in and placement (written by users, the webhook and placement).
ENABLED_LABEL = f"{PREFIX}/enabled"
POOL_LABEL = f"{PREFIX}/pool"
ACCELERATOR_LABEL = f"{PREFIX}/accelerator"
PROVIDER_KEY = f"{PREFIX}/provider"  # node label, nodeSelector key, taint key, toleration key
PLACEMENT_GATE = f"{PREFIX}/placement"
CAPACITY_TYPE_ANNOTATION = f"{PREFIX}/capacity-type"
REGION_ANNOTATION = f"{PREFIX}/region"

# Written by the vnode on the Pod (metadata first, then status).
INSTANCE_ID_ANNOTATION = f"{PREFIX}/instance-id"
ENDPOINT_ANNOTATION = f"{PREFIX}/endpoint"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "nebula"

# Pod status reasons.
REASON_PROVISIONING = "Provisioning"
REASON_INITIALIZING = "Initializing"
REASON_RUNNING = "Running"
REASON_COMPLETED = "Completed"
REASON_FAILED = "Failed"
REASON_TERMINATING = "Terminating"
REASON_TERMINATED = "Terminated"
REASON_INSTANCE_LOST = "InstanceLost"
REASON_PROVISION_FAILED = "ProvisionFailed"
REASON_CONFIG_ERROR = "ConfigError"
REASON_UNSUPPORTED_POD_SPEC = "UnsupportedPodSpec"  # a Pod field the provider cannot serve (design I9)
REASON_CRASH_LOOP = "CrashLoopBackOff"  # a container's waiting reason during its restart back-off
REASON_CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"  # the kubelet's: its env cannot be resolved
REASON_PREEMPTED = "Preempted"  # the provider took the capacity back (a spot reclaim): given up
REASON_QUEUED_TOO_LONG = "QueuedTooLong"  # the instance stayed PROVISIONING past its pool's timeout

# Event reasons.
EVENT_PROVISIONED = "Provisioned"
EVENT_PROVISION_FAILED = "ProvisionFailed"
EVENT_PROVISION_RETRYING = "ProvisionRetrying"
EVENT_IMAGE_NOT_USED = "ImageNotUsed"
EVENT_PULL_SECRET_UNREAD = "FailedToRetrieveImagePullSecret"  # the kubelet's: an imagePullSecret it could not use
EVENT_PULL_SECRETS_NOT_USED = "ImagePullSecretsNotUsed"  # the provider pulls images without the Pod's credentials
EVENT_FAILED_MOUNT = "FailedMount"  # the kubelet's: a volume it could not set up (a missing ConfigMap/Secret)
EVENT_TERMINATED = "InstanceTerminated"
EVENT_INSTANCE_LOST = "InstanceLost"
EVENT_ORPHAN_TERMINATED = "OrphanTerminated"
EVENT_PROVIDER_UNREACHABLE = "ProviderUnreachable"
EVENT_STILL_RETRYING = "StillRetrying"
EVENT_CONFIG_ERROR = "ConfigError"
# The kubelet's own words for a container's life, on each Pod (kubectl describe pod).
EVENT_PROVISIONING = "Provisioning"
EVENT_STARTED = "Started"
EVENT_EPHEMERAL_UNSERVED = "EphemeralFieldsNotApplied"  # an ephemeral container's fields the exec cannot honour
EVENT_EPHEMERAL_FAILED = "Failed"  # the kubelet's: a container (here an ephemeral one) that could not start
EVENT_EPHEMERAL_OUTPUT_DROPPED = "EphemeralOutputDropped"  # kept ephemeral output dropped for the process budget (I7)
EVENT_CONTAINER_FAILED = "Failed"  # the kubelet's FailedToCreateContainer: `Error: <why>` (a config error)
EVENT_KILLING = "Killing"
EVENT_UNHEALTHY = "Unhealthy"  # a probe failed (the kubelet's words)
EVENT_FAILED_KILL_POD = "FailedKillPod"  # a container could not be stopped
EVENT_BACKOFF = "BackOff"
EVENT_PREEMPTED = "Preempted"
EVENT_QUEUED_TOO_LONG = "QueuedTooLong"  # an instance given up: still provisioning past the pool's timeout
EVENT_RESTARTING = "Restarting"  # a restart by a new instance (the provider cannot restart in place)

# Node condition saying whether the provider answers.
CONDITION_PROVIDER_REACHABLE = "ProviderReachable"

LEASE_NAMESPACE = "kube-node-lease"


def node_name(provider: str) -> str:
    """The virtual node of `provider`."""
    return f"nebula-{provider}"


def connect_secret_name(pod_name: str) -> str:
    """The Secret holding a Pod's connect credential (as in the Go original)."""
    return f"{pod_name}-connect"


# Placement (written by the placement controller on the Pod it ungates).
POOL_ANNOTATION = f"{PREFIX}/pool"
HOURLY_PRICE_ANNOTATION = f"{PREFIX}/hourly-price"
# A Pod's own ceiling in dollars an hour: offerings dearer than it are not candidates.
MAX_HOURLY_PRICE_ANNOTATION = f"{PREFIX}/max-hourly-price"
# Added by placement with the ungate patch; removed once the Pod's spend is settled into its
# pool's status (so a deleted Pod's spend is never lost, and never counted twice).
SPEND_FINALIZER = f"{PREFIX}/spend"

# Money (design I12). The vnode writes each Pod's billing record (`kube.billing`), and on its
# Node the last moment it saw every billing instance (bounds what a crash can lose).
BILLING_ANNOTATION = f"{PREFIX}/billing"
BILLING_SEEN_ANNOTATION = f"{PREFIX}/billing-seen-at"
# Placement asks the vnode to stop a Pod (with its grace) and end it Failed with this reason and message.
STOP_REASON_ANNOTATION = f"{PREFIX}/stop-reason"
STOP_MESSAGE_ANNOTATION = f"{PREFIX}/stop-message"
REASON_BUDGET_EXCEEDED = "BudgetExceeded"  # Pod reason, Event reason and NodePool condition type
EVENT_BUDGET_EXCEEDED = "BudgetExceeded"
CONDITION_BUDGET_EXCEEDED = "BudgetExceeded"

# Interruptions (docs/interruptions.md). The vnode records a provider's notice on its Pod (JSON:
# kind, deadline, issuedAt, id, detail), so a restarted manager resumes the stop it began.
INTERRUPTION_ANNOTATION = f"{PREFIX}/interruption"
# Placement carries a workload's recent interruptions (RFC 3339 times, comma-separated, newest
# last, bounded) on each Pod it places for it, so `interruption.fallbackToOnDemandAfter` counts
# across Pods and manager restarts.
INTERRUPTIONS_ANNOTATION = f"{PREFIX}/interruptions"
# A Pod's status reason (and its Event's) for each interruption, by the notice's kind; with
# REASON_PREEMPTED (seen only after the fact) these are the "interrupted" cause.
REASON_SPOT_INTERRUPTED = "SpotInterrupted"
REASON_MAINTENANCE_SCHEDULED = "MaintenanceScheduled"
REASON_INSTANCE_STOPPING = "InstanceStopping"
REASON_REBALANCE_RECOMMENDED = "RebalanceRecommended"  # a Pod stopped only when its pool asks `proactive`
INTERRUPTED_REASONS = frozenset(
    {
        REASON_PREEMPTED,
        REASON_SPOT_INTERRUPTED,
        REASON_MAINTENANCE_SCHEDULED,
        REASON_INSTANCE_STOPPING,
        REASON_REBALANCE_RECOMMENDED,
    }
)
EVENT_REBALANCE_RECOMMENDED = "RebalanceRecommended"  # a notice that took nothing: an Event only
# The Pod condition the vnode keeps while its provider does not answer (the "unreachable" cause):
# False with reason ProviderUnreachable; True again (reason ProviderReachable) once it answers.
POD_CONDITION_PROVIDER_REACHABLE = f"{PREFIX}/ProviderReachable"  # the Node's is CONDITION_PROVIDER_REACHABLE
REASON_PROVIDER_REACHABLE = "ProviderReachable"
REASON_PROVIDER_UNREACHABLE = "ProviderUnreachable"
# Placement: a workload moved to OnDemand by `interruption.fallbackToOnDemandAfter`, and a gated
# Pod failed once `failover.waitForCapacity` ran out with no candidate.
EVENT_FALLBACK_TO_ON_DEMAND = "FallbackToOnDemand"
REASON_CAPACITY_WAIT_EXCEEDED = "CapacityWaitExceeded"

# The NodePool custom resource.
NODEPOOL_GROUP = PREFIX
NODEPOOL_VERSION = "v1alpha1"
NODEPOOL_PLURAL = "nodepools"
NODEPOOL_KIND = "NodePool"

# The mutating admission webhook.
WEBHOOK_PATH = "/webhooks/pods"
WEBHOOK_NAME = "pods.placement.nebula.io"

# Placement Event reasons.
EVENT_PLACED = "Placed"
EVENT_NO_CANDIDATE = "NoCandidate"
EVENT_NO_POOL = "NoPool"
EVENT_POOL_INVALID = "PoolInvalid"
EVENT_INVALID_REQUEST = "InvalidRequest"
EVENT_REPLACING = "ReplacingFailedPod"
EVENT_BLOCK_CLEARED = "BlocklistEntryCleared"
EVENT_NOT_GATED = "NotGated"  # an opted-in Pod created without the gate: no webhook gated it

# node events (h-node)
# The kubelet's Event reasons for its node's Ready condition (both of type Normal).
EVENT_NODE_READY = "NodeReady"
EVENT_NODE_NOT_READY = "NodeNotReady"

# placement (h-placement)
EVENT_WAITING_FOR_CAPACITY = "WaitingForCapacity"  # a gated Pod waits: sold out, blocked, or offerings unknown
REASON_SCHEDULING_GATED = "SchedulingGated"  # the API server's reason for a Pod held by a scheduling gate

# The leader Lease's annotations: where the leader's console answers, for the standbys to forward to.
CONSOLE_URL_ANNOTATION = f"{PREFIX}/console-url"
CONSOLE_CERT_SHA256_ANNOTATION = f"{PREFIX}/console-cert-sha256"
