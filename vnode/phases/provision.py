"""Provisioning one Pod: resolve its volumes and env, call `provider.provision`, record the instance, or refuse.

`Provisioner.create_pod` is called by the pod controller's workers (and by a replacement in
`vnode.phases.lifecycle`). Writes the
instance id to the Pod through `PodWriter.flush` before returning, the connect Secret,
and Events; reports refusals to the Blocklister. Never logs or puts into an Event a
resolved env value, a volume's contents or a credential (I4).

Invariant (I2): the instance id is in the tracked map and on the Pod's annotations before
`create_pod` returns; see
tests/vnode/test_controllers.py::test_I2_the_instance_id_is_on_the_pod_before_create_pod_returns.
Invariant (I4): resolved env values and volume contents reach only the provider; see
tests/vnode/test_secrets.py::test_I4_an_unresolvable_env_names_the_key_and_object_never_a_value and
tests/vnode/test_volumes.py::test_I4_a_secret_volume_reaches_the_provider_and_no_log_event_or_status.
Invariant (I9): a Pod shape the provider cannot serve fails by name, never runs in part; see
tests/vnode/test_shapes.py::test_I9_a_bound_pod_the_provider_cannot_serve_fails_naming_the_field.
Invariant (I3): `Unavailable` retries, never fails the Pod; see
tests/vnode/test_invariants.py::test_I3_provider_unreachable_across_a_restart_changes_nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube import names, observe
from kube.times import rfc3339
from kube.worker import Retry
from providers import errors, shapecheck
from providers.base import ClaimName, Instance, InstanceState, PodSpec, ProvisionRequest, ProvisionResult, Tier
from providers.egress import OPEN as OPEN_EGRESS
from providers.podspec import pod_spec_from_dict, requested_tier
from vnode.model import assess, containerstatus, status, stopping
from vnode.model.tracking import Tracked, pod_claim, pod_key
from vnode.phases.context import PhaseContext
from vnode.sources.env import EnvError, MissingSource, PodFields, resolve_pod_env
from vnode.sources.pullsecrets import PullAuth, resolve_pull_auth
from vnode.sources.volumes import InvalidVolume, MountError, resolve_volumes

JsonDict = dict[str, Any]


MAX_REMEMBERED_STARTS = 4096  # startTimes of Pods waiting for a Secret, remembered at once


class WaitingForSource(Retry):
    """The Pod's env or a volume needs a Secret or ConfigMap that does not exist yet: retry,
    and sooner when `missing` appears (the pod controller watches that one object)."""

    def __init__(self, message: str, *, missing: MissingSource, delay: float | None = None) -> None:
        super().__init__(message, delay=delay)
        self.missing = missing


@dataclass(frozen=True)
class IncomingPod:
    """A Pod as provisioning reads it, parsed once at the door (`of`): the typed `PodSpec` the
    provider gets (None when it cannot be read: `invalid` says why, and the Pod is refused
    where it always was, after the shape check and its sources), what the sources read
    (`PodFields`), and the request's claim, tier, region and pool. `pod` (the JSON) stays for
    what is written back about the Pod (its status, Events, annotations) and for the shape
    check, which is a check of the JSON's fields. Tests: tests/vnode/test_provision.py."""

    pod: JsonDict
    key: str
    claim: ClaimName
    spec: PodSpec | None
    invalid: str
    fields: PodFields
    tier: Tier | None
    region: str | None
    pool: str | None  # its `nebula.io/pool` label (None: placed from no pool)

    @classmethod
    def of(cls, pod: JsonDict) -> IncomingPod:
        try:
            spec, invalid = pod_spec_from_dict(pod), ""
        except ValueError as exc:
            spec, invalid = None, str(exc)
        fields = PodFields.of(pod)
        return cls(
            pod,
            key=pod_key(pod),
            claim=pod_claim(pod),
            spec=spec,
            invalid=invalid,
            fields=fields,
            tier=requested_tier(pod),
            region=fields.annotations.get(names.REGION_ANNOTATION) or None,
            pool=fields.labels.get(names.POOL_LABEL) or None,
        )


class Provisioner:
    def __init__(self, context: PhaseContext, *, flush: Callable[[str, Mapping[str, Any] | None], None]) -> None:
        self._provider = context.provider
        self._flush = flush  # the Handler's: the status recomputed with everything it says, then written
        self._pools = context.pools
        self._tracked = context.tracked
        self._writer = context.writer
        self._reader = context.reader
        self._events = context.events
        self._capabilities = context.capabilities
        self._rules = context.rules
        self._blocklister = context.blocklister
        self._monotonic = context.monotonic
        self._now = context.now
        # key -> (UID, startTime) written with a CreateContainerConfigError: the Pod a later try
        # reads may predate that write, and its startTime must not start again (oldest dropped).
        self._started: dict[str, tuple[str, str]] = {}

    def create_pod(self, pod: JsonDict) -> None:
        """Provision the Pod's instance. Returns once the instance id is recorded in memory
        and on the Pod (I2), or once the Pod is refused (Failed, with an Event); raises
        Retry (WaitingForSource for a missing Secret/ConfigMap) when it must be tried again.
        A Pod whose shape the provider cannot serve fails first, naming the fields (I9).
        The Pod is read once, here (`IncomingPod`); what follows takes what was read."""
        pod = self._with_start_time(pod)
        incoming = IncomingPod.of(pod)
        deadline = stopping.deadline_of(pod)  # a Pod that waited for a Secret has a startTime
        if deadline is not None and deadline <= self._now():
            return self._past_deadline(pod)
        unserved = shapecheck.unserved(pod, self._capabilities().shapes)
        for need in unserved:
            if need.warn_only:
                self._events.pod(pod, "Warning", names.REASON_UNSUPPORTED_POD_SPEC, f"{need.field}: {need.feature}")
        if shapecheck.refusals(unserved):
            message = shapecheck.refusal_message(self._provider.name, unserved)
            return self._refuse(pod, names.REASON_UNSUPPORTED_POD_SPEC, message)
        try:
            request = self._request(incoming)
        except InvalidVolume as exc:  # the API server would have rejected the Pod
            return self._refuse(pod, names.REASON_CONFIG_ERROR, str(exc))
        started, who = self._monotonic(), observe.Subject(incoming.key, request.claim)

        def outcome(label: str, subject: observe.Subject = who) -> None:
            observe.current().provisioned(self._provider.name, label, self._monotonic() - started, subject)

        where = ", ".join(
            f"{word} {value}"
            for word, value in (
                ("tier", request.capacity_type and request.capacity_type.value),
                ("region", request.region),
            )
            if value
        )
        self._events.pod(
            pod,
            "Normal",
            names.EVENT_PROVISIONING,
            f"provisioning an instance on {self._provider.name}" + (f" ({where})" if where else ""),
        )
        spec = incoming.spec
        if spec is None:
            outcome("invalid")
            return self._refuse(pod, names.REASON_CONFIG_ERROR, incoming.invalid)
        try:
            result = self._provider.provision(spec, request)
        except ValueError as exc:
            outcome("invalid")
            return self._refuse(pod, names.REASON_CONFIG_ERROR, str(exc))
        except errors.Unavailable as exc:
            outcome("unavailable")
            self._events.pod(pod, "Warning", names.EVENT_PROVISION_RETRYING, f"provider unreachable: {exc}")
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except (errors.Refused, errors.InvalidRequest, errors.NotSupported) as exc:
            # Asked, and the answer was no: retrying cannot help. The candidate is blocked for
            # this workload's shape, so placement's replacement Pod goes elsewhere.
            outcome("refused" if isinstance(exc, errors.Refused) else "invalid")
            scope = self._provider.classify_provision_error(
                exc, accelerator=spec.accelerator, tier=request.capacity_type, region=request.region
            )
            if self._blocklister is not None:
                self._blocklister.record(self._provider.name, scope, pool=incoming.pool)
            return self._refuse(pod, names.REASON_PROVISION_FAILED, f"{type(exc).__name__}: {exc}")
        except errors.NotFound as exc:
            outcome("invalid")
            return self._refuse(pod, names.REASON_PROVISION_FAILED, f"{type(exc).__name__}: {exc}")
        except errors.ProviderError as exc:
            outcome("error")
            raise Retry(f"{type(exc).__name__}: {exc}") from exc
        outcome("ok", who.on(result.instance_id))
        took = self._monotonic() - started
        self._record_instance(incoming, spec, result, took=took)

    def _request(self, incoming: IncomingPod) -> ProvisionRequest:
        """What the provider needs beyond the Pod: the claim, tier, region, every container's
        resolved env, the volumes' contents and the egress policy of the Pod's pool (its
        `nebula.io/pool` label; Open without pools). Volumes first, as the kubelet mounts them
        before it starts a container. Raises WaitingForSource for a missing Secret/ConfigMap,
        Retry for another unresolvable source, InvalidVolume for a volume field to refuse."""
        pod, fields = incoming.pod, incoming.fields
        try:
            volumes = resolve_volumes(
                fields, read_secret=self._reader.read_secret_bytes, read_configmap=self._reader.read_configmap_bytes
            )
            env = resolve_pod_env(
                fields, read_secret=self._reader.read_secret, read_configmap=self._reader.read_configmap
            )
        except (MountError, EnvError) as exc:
            self._events.pod(pod, "Warning", exc.reason, str(exc))
            if isinstance(exc, MountError) and not (pod.get("status") or {}).get("containerStatuses"):
                self._writer.write_status(pod, containerstatus.before_start_status(pod, now=self._now()))
            if isinstance(exc, EnvError) and not exc.unread:  # an API that did not answer is no verdict
                self._config_error(incoming, exc)
            # A Pod with a deadline is looked at again by then at the latest (it fails at it).
            deadline = stopping.deadline_of(pod)
            left = None if deadline is None else max((deadline - self._now()).total_seconds(), 0.0) + 0.05
            if exc.missing is not None:
                raise WaitingForSource(str(exc), missing=exc.missing, delay=left) from exc
            raise Retry(str(exc), delay=left) from exc
        for reason, message in env.warnings:
            self._events.pod(pod, "Warning", reason, message)
        pull = self._pull_auth(incoming)
        egress = self._pools.egress_of(incoming.pool) if self._pools is not None else OPEN_EGRESS
        return ProvisionRequest(
            claim=incoming.claim,
            capacity_type=incoming.tier,
            region=incoming.region,
            env=env.containers.get(env.first, {}),
            container_env=env.containers,
            volumes=volumes,
            egress=egress,
            registry_auth=pull.auths,
        )

    def _config_error(self, incoming: IncomingPod, exc: EnvError) -> None:
        """A container's env cannot be resolved: what a kubelet shows of it, on each try. The
        Pod's status (`containerstatus.config_error_status`: `CreateContainerConfigError`),
        written when it differs from the Pod's (never over a tracked Pod's: its own status
        wins), and per such container the kubelet's Warning `Failed`, `Error: <why>`, which
        the EventRecorder counts."""
        pod = incoming.pod
        desired = containerstatus.config_error_status(pod, exc.failed, now=self._now())
        current: Mapping[str, Any] = pod.get("status") or {}
        if incoming.key not in self._tracked and any(current.get(k) != v for k, v in desired.items()):
            if self._writer.write_status(pod, desired) and desired.get("startTime"):
                self._started.pop(incoming.key, None)
                self._started[incoming.key] = (str((pod.get("metadata") or {}).get("uid")), desired["startTime"])
                while len(self._started) > MAX_REMEMBERED_STARTS:
                    del self._started[next(iter(self._started))]
        for entry in [*desired.get("initContainerStatuses", ()), *desired["containerStatuses"]]:
            waiting = entry["state"].get("waiting") or {}
            if waiting.get("reason") == names.REASON_CREATE_CONTAINER_CONFIG_ERROR:
                self._events.pod(pod, "Warning", names.EVENT_CONTAINER_FAILED, f"Error: {waiting['message']}")

    def _with_start_time(self, pod: JsonDict) -> JsonDict:
        """`pod` with the startTime its CreateContainerConfigError status was written with, when
        the copy read predates that write (a kubelet stamps startTime once, at the first sync)."""
        key = pod_key(pod)
        uid, started = self._started.get(key, ("", ""))
        current = pod.get("status") or {}
        if not started or uid != (pod.get("metadata") or {}).get("uid") or current.get("startTime"):
            return pod
        return {**pod, "status": {**current, "startTime": started}}

    def _pull_auth(self, incoming: IncomingPod) -> PullAuth:
        """The Pod's imagePullSecrets as registry credentials, when the provider uses them;
        a Warning for a Secret it could not read (the kubelet's), or for credentials the
        provider's image pull does not take."""
        pod = incoming.pod
        if not incoming.fields.pull_secrets:
            return PullAuth()
        capabilities = self._capabilities()
        if not capabilities.pulls_images:
            return PullAuth()  # ImageNotUsed says the image is not pulled at all
        if not capabilities.uses_pull_secrets:
            message = (
                f"{self._provider.name} pulls images without the Pod's imagePullSecrets; "
                "a private image may fail to pull"
            )
            self._events.pod(pod, "Warning", names.EVENT_PULL_SECRETS_NOT_USED, message)
            return PullAuth()
        pull = resolve_pull_auth(incoming.fields, self._reader.read_secret_bytes)
        if (warning := pull.warning()) is not None:
            self._events.pod(pod, "Warning", names.EVENT_PULL_SECRET_UNREAD, warning)
        return pull

    def _record_instance(self, incoming: IncomingPod, spec: PodSpec, result: ProvisionResult, *, took: float) -> None:
        pod = incoming.pod
        entry = self._tracked.track(pod)
        with entry.lock:  # a replacement's entry: no read of the new instance applied yet
            entry.facts_read, entry.instance_id = None, result.instance_id
        entry.provisioned_at = self._monotonic()
        entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = result.instance_id
        if result.endpoint:
            entry.desired_annotations[names.ENDPOINT_ANNOTATION] = result.endpoint
        if result.credential is not None:
            # Minted once: kept on the entry until its Secret exists, so a failed write
            # below (or of the Secret itself) is retried by the next flush, never lost.
            entry.credential = dict(result.credential.data)
        entry.say("Normal", names.EVENT_PROVISIONED, f"instance {result.instance_id} provisioned in {took:.1f}s")
        if not self._capabilities().pulls_images:
            message = f"{self._provider.name} does not pull container images; image {spec.image!r} is not used"
            self._events.pod(pod, "Normal", names.EVENT_IMAGE_NOT_USED, message)
        try:
            self._take_first_answer(entry, result)
        finally:
            # I2: on the Pod before we report success (whatever the answer did). After the first
            # answer, so the instance's annotations and the status it reads (Running, when it runs
            # at once) are one write.
            self._flush(entry.key, pod)

    def _take_first_answer(self, entry: Tracked, result: ProvisionResult) -> None:
        """One `get` right after provisioning, fed to the status decision a poll's list feeds
        (`assess.observe`): the caller's flush writes the Pod Running at once when the instance
        runs already, not at the next poll. Facts are ordered by when they were read: the
        answer is applied only if the get began at or after the read behind the facts applied
        last returned (`facts_read`), and stamps them with when it returned, so a list begun
        before then is skipped by the status sync (`_older_than_recorded`). A failed or empty
        get says only what provisioning said (the instance exists since `provisioned_at`): it
        is applied only when no read was. Neither regresses the other.
        Tests: tests/vnode/test_one_pod_latency.py."""
        begun = self._monotonic()
        try:
            instance = self._provider.get(result.instance_id)
        except errors.ProviderError:
            instance = None
        read = self._monotonic()
        with entry.lock:
            if instance is None:
                if entry.facts_read is not None:
                    return  # a list's read is applied already: it says more than provisioning
                state = InstanceState.INITIALIZING if result.reserved else InstanceState.PROVISIONING
                instance = Instance(result.instance_id, entry.claim, state, created_at=self._now())
                read = entry.provisioned_at
            elif entry.facts_read is not None and begun < entry.facts_read:
                return  # a list that may have read the instance later is applied already
            entry.facts_read = read
            assess.observe(entry, instance, now=self._now(), at=self._monotonic(), rules=self._rules())

    def _past_deadline(self, pod: JsonDict) -> None:
        """A Pod that never got an instance (it waited for a Secret) and ran past its
        `activeDeadlineSeconds`: Failed/DeadlineExceeded with the kubelet's Event, as a kubelet
        fails a Pod stuck before its containers start."""
        entry = self._tracked.track(pod)
        entry.terminal = True
        waiting = dict(pod.get("status") or {}) or status.failed_status(
            pod, reason=stopping.DEADLINE_REASON, message=stopping.DEADLINE_MESSAGE, now=self._now()
        )
        entry.desired_status = stopping.deadline_status(waiting, now=rfc3339(self._now()))
        self._events.pod(pod, "Normal", stopping.DEADLINE_REASON, stopping.DEADLINE_MESSAGE)

    def _refuse(self, pod: JsonDict, reason: str, message: str) -> None:
        """The provider will not serve this Pod: Failed, with an Event saying why."""
        entry = self._tracked.track(pod)
        entry.terminal = True
        entry.desired_status = status.failed_status(pod, reason=reason, message=message, now=self._now())
        self._events.pod(pod, "Warning", reason, message)
