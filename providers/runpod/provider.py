"""`RunPodProvider`: one RunPod pod per Pod claim, watched by name, with SSH logs, exec and stop.

Built by `providers.registry` from settings (`providers.runpod.RunPodProvider`); called by
the vnode and the kubelet API. GraphQL goes through `api.RunPodApi` only (see its docstring
for why not the SDK's `ctl_commands`); ownership and SSH keys are `identity`'s; states
`status`'s; the workload wrapper `workload`'s. Idempotency is ours: provision lists this
owner's pods (one `myself { pods }` call) and adopts the claim's live pod.
Tests: tests/providers/runpod/test_runpod_provider.py, tests/providers/runpod/test_runpod_provider_ssh.py,
tests/providers/runpod/test_runpod_provider_stop.py.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers import base, claimlocks, ssh
from providers.egress import EgressMode
from providers.errors import InvalidRequest, NoCapacity, NotFound, NotSupported, ProviderError, Unauthorized
from providers.owner import Owned, Owner
from providers.runpod import catalog, identity, remote, status, workload
from providers.runpod.api import GPU_TYPES_QUERY, QUERY_POD, RunPodApi, Word, deploy_mutation, generate_pod_query
from providers.runpod.classify import classify
from providers.runpod.options import RunPodOptions, parse_options
from providers.runpod.sdk import generate_gpu_query, generate_pod_terminate_mutation
from providers.ssh import usage as ssh_usage
from providers.usage import Reading, UsageSampler, instance_usage

logger = logging.getLogger(__name__)

KEY_NAME = "RUNPOD_API_KEY"
_POD_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")
_PARALLEL_PROBES = 8


class RunPodProvider(Owned):
    """Runs each Pod on its own RunPod pod. Options: see `options.RunPodOptions`."""

    def __init__(self, name: str, options: Mapping[str, Any] | None = None, *, owner: Owner | None = None) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: RunPodOptions = parse_options(options or {})
        self._api = RunPodApi(self._options.api_base_url, self._api_key, timeout=self._options.request_timeout)
        secret = identity.file_secret(self._options.ssh_secret_file) if self._options.ssh_secret_file else None
        self._keys = identity.KeySource(secret or (lambda: self._api_key().encode()))
        self._lock = threading.Lock()
        self._claim_locks = claimlocks.ClaimLocks()
        self._verdicts: dict[str, status.Verdict] = {}  # final (exit seen) verdicts by pod id
        self._first_seen: dict[str, datetime] = {}
        self._usage = UsageSampler()

    def __repr__(self) -> str:
        return f"RunPodProvider({self._name!r}, {self._options.api_base_url!r})"

    def _api_key(self) -> str:
        """The API key: `<credentials_dir>/RUNPOD_API_KEY`, else env RUNPOD_API_KEY (read each call)."""
        if self._options.credentials_dir:
            try:
                key = (Path(self._options.credentials_dir) / KEY_NAME).read_text().strip()
            except OSError as exc:
                raise Unauthorized(f"runpod: no readable {KEY_NAME} in {self._options.credentials_dir}") from exc
        else:
            key = os.environ.get(KEY_NAME, "").strip()
        if not key:
            raise Unauthorized(f"runpod: no API key ({KEY_NAME} is empty)")
        return key

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(
            poll_interval=self._options.poll_interval,
            tiers=(base.Tier.ON_DEMAND, base.Tier.SPOT),
            regions=self._options.regions,
            capacity=dict(base.UNBOUNDED_CAPACITY),
            pulls_images=True,
            log_timestamps=self._options.ssh,
            restarts_in_place=False,
            bills_after_exit=True,
            keeps_output_after_terminate=False,
            billing_starts=base.BillingStart.CREATED,  # RunPod bills from the Pod's creation, image pull included
        )

    # -- provision ----------------------------------------------------------------------
    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest) -> base.ProvisionResult:
        if request.egress.mode is not EgressMode.OPEN:  # RunPod offers no outbound firewall
            mode = request.egress.mode.value
            raise NotSupported(f"spec.egress: {self._name} cannot enforce egress {mode}; only Open")
        if not pod.image:
            raise InvalidRequest("the Pod's first container has no image (spec.containers[0].image)")
        tier = request.capacity_type or base.Tier.ON_DEMAND
        region = self._region_for(request)
        gpu_type = catalog.gpu_type_for(pod.accelerator) if pod.accelerator else None
        if gpu_type is None and tier is base.Tier.SPOT:
            raise NotSupported(
                "runpod sells spot (interruptible) capacity for GPU pods only: set nebula.io/accelerator"
            )
        with self._claim_locks.held(request.claim):
            for data in self._owned_pods():
                if identity.claim_of(data, self._owner) == request.claim and self._live(data):
                    return base.ProvisionResult(
                        base.InstanceId(str(data["id"])), reserved=True, endpoint=status.endpoint_of(data)
                    )
            key = self._keys.pair(self._owner, request.claim)
            query = self._deploy_query(pod, request, key, tier, region, gpu_type)
            secrets = identity.secret_values([request.env])
            created = self._api.run(query, secrets=secrets)
        answer = next((value for value in created.values() if isinstance(value, dict)), None)
        if not answer or not answer.get("id"):
            raise NoCapacity("runpod deployed no pod (its answer names none)")
        pod_id = str(answer["id"])
        logger.info(
            "deployed runpod pod %s for claim %s (%s, %s, %s)",
            pod_id,
            request.claim,
            gpu_type or "cpu",
            tier.value,
            region or "any data centre",
        )
        credential = base.ConnectCredential({"ssh-privatekey": key.private_openssh, "username": b"root"})
        endpoint = status.endpoint_of({"id": pod_id, "ports": _ports(pod, self._options.ssh)})
        return base.ProvisionResult(base.InstanceId(pod_id), reserved=True, credential=credential, endpoint=endpoint)

    def _deploy_query(
        self,
        pod: base.PodSpec,
        request: base.ProvisionRequest,
        key: identity.KeyPair,
        tier: base.Tier,
        region: str | None,
        gpu_type: str | None,
    ) -> str:
        env = dict(request.env)
        env.update(
            {
                "PUBLIC_KEY": key.public_line,
                identity.ENV_CLAIM: request.claim,
                identity.ENV_OWNER: self._owner.key,
                identity.ENV_TIER: tier.value,
                identity.ENV_REGION: region or "",
                workload.ENV_WORKLOAD: workload.script(pod),
            }
        )
        fields: dict[str, Any] = {
            "name": identity.pod_name(self._owner, request.claim),
            "imageName": pod.image,
            "cloudType": Word(self._options.cloud_type),
            "startSsh": True,
            "dataCenterId": region,
            "dockerArgs": workload.DOCKER_ARGS,
            "containerDiskInGb": self._options.container_disk_gb,
            "ports": _ports(pod, self._options.ssh),
        }
        if gpu_type is None:
            fields.update(
                instanceId=catalog.cpu_instance_for(pod, self._options.cpu_flavor), templateId="runpod-ubuntu"
            )
            return deploy_mutation("deployCpuPod", fields, env)
        count = max(1, pod.gpu_count)
        fields.update(gpuTypeId=gpu_type, gpuCount=count, supportPublicIp=True, volumeInGb=0)
        if tier is base.Tier.SPOT:
            fields["bidPerGpu"] = self._bid(gpu_type, count)
            return deploy_mutation("podRentInterruptable", fields, env)
        return deploy_mutation("podFindAndDeployOnDemand", fields, env)

    def _bid(self, gpu_type: str, count: int) -> float:
        if self._options.spot_bid is not None:
            return self._options.spot_bid
        data = self._api.run(generate_gpu_query(gpu_type.replace('"', ""), count))
        types = data.get("gpuTypes") or []
        lowest = (types[0].get("lowestPrice") or {}) if types else {}
        minimum = lowest.get("minimumBidPrice")
        if not isinstance(minimum, int | float) or minimum <= 0:
            raise NoCapacity(f"runpod offers no spot {gpu_type} now (no minimum bid)")
        return round(float(minimum) * self._options.bid_multiplier, 4)

    def _region_for(self, request: base.ProvisionRequest) -> str | None:
        if not request.region:
            return self._options.regions[0] if self._options.regions_given else None
        expanded = self.expand_regions([request.region])
        if not expanded:
            raise InvalidRequest(f"the runpod provider does not serve data centre {request.region!r}")
        return expanded[0]

    def _live(self, data: dict[str, Any]) -> bool:
        with self._lock:
            ended = str(data["id"]) in self._verdicts
        return str(data.get("desiredStatus")) == "RUNNING" and not ended

    # -- observe and terminate ------------------------------------------------------------
    def _owned_pods(self) -> builtins.list[dict[str, Any]]:
        pods = (self._api.run(QUERY_POD).get("myself") or {}).get("pods") or []
        return [p for p in pods if isinstance(p, dict) and identity.claim_of(p, self._owner)]

    def _pod(self, instance_id: base.InstanceId) -> dict[str, Any] | None:
        if not _POD_ID.match(str(instance_id)):
            return None
        try:
            data = self._api.run(generate_pod_query(str(instance_id))).get("pod")
        except NotFound:
            return None
        if not isinstance(data, dict) or not identity.claim_of(data, self._owner):
            return None
        if str(data.get("desiredStatus")) == "TERMINATED":
            return None
        return data

    def get(self, instance_id: base.InstanceId) -> base.Instance | None:
        data = self._pod(instance_id)
        return self._facts(data) if data else None

    def list(self) -> builtins.list[base.Instance]:
        pods = [p for p in self._owned_pods() if str(p.get("desiredStatus")) != "TERMINATED"]
        due = [p for p in pods if self._needs_probe(p)]
        if due:
            with ThreadPoolExecutor(max_workers=min(len(due), _PARALLEL_PROBES)) as pool:
                probed = dict(zip([str(p["id"]) for p in due], pool.map(self._probe, due), strict=True))
        else:
            probed = {}
        with self._lock:
            keep = {str(p["id"]) for p in pods}
            for gone in [k for k in self._verdicts if k not in keep]:
                del self._verdicts[gone]
        return [self._facts(p, probed.get(str(p["id"])), probe=False) for p in pods]

    def _needs_probe(self, data: dict[str, Any]) -> bool:
        with self._lock:
            final = str(data["id"]) in self._verdicts
        return self._options.ssh and status.has_runtime(data) and not final

    def _probe(self, data: dict[str, Any]) -> status.Verdict | None:
        """The pod's state files over SSH (None: SSH did not answer); a final one is kept."""
        claim = identity.claim_of(data, self._owner)
        if claim is None:
            return None
        target = remote.target_for(
            data, self._keys.pair(self._owner, claim), connect_timeout=self._options.connect_timeout
        )
        if target is None:
            return None
        try:
            verdict = remote.probe(target)
        except ProviderError as exc:
            logger.debug("probe of runpod pod %s: %s", data["id"], exc)
            return None
        if verdict.exit_code is not None:
            with self._lock:
                self._verdicts[str(data["id"])] = verdict
        return verdict

    def _facts(
        self, data: dict[str, Any], verdict: status.Verdict | None = None, *, probe: bool = True
    ) -> base.Instance:
        pod_id = str(data["id"])
        with self._lock:
            cached = self._verdicts.get(pod_id)
            created = self._first_seen.setdefault(pod_id, datetime.now(UTC))
        if cached is None and verdict is None and probe and self._needs_probe(data):
            verdict = self._probe(data)
        claim = identity.claim_of(data, self._owner)
        assert claim is not None
        return status.instance_from(data, claim, created, cached or verdict, ssh=self._options.ssh)

    def terminate(self, instance_id: base.InstanceId) -> None:
        """podTerminate only for this owner's pod; gone already (or another's) is success."""
        data = self._pod(instance_id)
        if data is None:
            return
        try:
            self._api.run(generate_pod_terminate_mutation(str(data["id"])))
        except NotFound:
            return
        logger.info("terminating runpod pod %s (claim %s)", instance_id, identity.claim_of(data, self._owner))

    # -- offerings and regions ------------------------------------------------------------
    def offerings(self) -> builtins.list[base.Offering]:
        types = self._api.run(GPU_TYPES_QUERY).get("gpuTypes") or []
        return catalog.offerings_from(types, self._options)

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        """`us`, `eu`, `ca`, `ap`... the data centres of that prefix; `*` all; ids as is if served."""
        result: builtins.list[str] = []
        for token in declared:
            word = token.strip().upper()
            if word in ("*", "ANY", "ALL"):
                matches = builtins.list(self._options.regions)
            elif "-" not in word:
                matches = [r for r in self._options.regions if r.split("-")[0] in (word, f"{word}R")]
            else:
                matches = [word] if word in self._options.regions else []
            result.extend(r for r in matches if r not in result)
        return result

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
    ) -> base.BlockScope:
        return classify(self._name, err, accelerator=accelerator, tier=tier, region=region)

    # -- logs, exec, usage ----------------------------------------------------------------------
    def _target(self, instance_id: base.InstanceId) -> ssh.SshTarget:
        data = self._pod(instance_id)
        if data is None:
            raise NotFound(f"no runpod pod {instance_id}")
        if not self._options.ssh:
            raise NotSupported("the runpod option 'ssh' is off: logs, exec and usage need SSH to the pod")
        claim = identity.claim_of(data, self._owner)
        assert claim is not None
        target = remote.target_for(
            data, self._keys.pair(self._owner, claim), connect_timeout=self._options.connect_timeout
        )
        if target is None or not status.has_runtime(data):
            raise NotFound(f"runpod pod {instance_id} is not running (no runtime, or no public SSH port)")
        return target

    def logs(self, instance_id: base.InstanceId, options: base.LogOptions) -> base.LogStream:
        if options.previous:
            raise NotSupported("each run of a RunPod Pod is a new pod: there is no previous log")
        return ssh.open_log_stream(self._target(instance_id), remote.WORKLOAD_LOG, options)

    def exec(
        self, instance_id: base.InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> base.Process:
        if not command:
            raise NotSupported("exec needs a command")
        argv = workload.exec_argv(builtins.list(command))
        return ssh.start_process(self._target(instance_id), argv, tty=tty, stdin=stdin)

    def stop_container(self, instance_id: base.InstanceId, container: str, *, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace`, over SSH by a detached process on the pod
        (`workload.stop_command`): returns once asked; the exit (143, 137 or the workload's
        own code) then shows in the exit file `get` reads. Ended or not started: success.
        A pod runs the Pod's one container: `container` names it."""
        try:
            target = self._target(instance_id)
        except NotFound:
            if self._pod(instance_id) is None:
                raise
            return  # no runtime: nothing runs
        remote.run(target, workload.stop_command(grace=grace))

    def usage(self, instance_id: base.InstanceId) -> base.InstanceUsage | None:
        return instance_usage(self._usage.sample_all(instance_id, lambda: self._read_usage(instance_id)))

    def _read_usage(self, instance_id: base.InstanceId) -> dict[str, Reading]:
        try:
            target = self._target(instance_id)
        except NotFound:
            if self._pod(instance_id) is None:
                raise
            return {}
        return ssh_usage.read_usage(target, remote.USAGE_ROOTS)


def _ports(pod: base.PodSpec, with_ssh: bool) -> str:
    entries = [f"{port}/http" for port in pod.ports if port != 22]
    return ",".join([*entries, *(["22/tcp"] if with_ssh else [])])


def _conforms(
    provider: RunPodProvider,
) -> tuple[base.Provider, base.LogStreamer, base.Executor, base.ContainerStopper, base.UsageReporter]:
    """mypy proves here, once, that RunPodProvider satisfies the seam's protocols."""
    return provider, provider, provider, provider, provider
