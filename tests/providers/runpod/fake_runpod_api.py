"""The fake RunPod's account: its pods, the GPU catalog, and the resolvers of the operations
the runpod SDK (1.12.0) sends, answering in RunPod's shapes.

Queries: `myself { pods {...} }`, `pod(input: {podId})` (null for a pod not there), `gpuTypes`
(optionally `input: {id}`) with `lowestPrice(input: {gpuCount})`. Mutations:
`podFindAndDeployOnDemand`, `deployCpuPod`, `podRentInterruptable` (needs `bidPerGpu`, at least
the type's `minimumBidPrice`), `podStop`, `podResume` (an on-demand pod only: "Cannot resume a
spot pod as an on demand pod."), `podBidResume`, `podTerminate` (answers null; the pod leaves
`myself.pods` and `pod` answers null). A deploy RunPod cannot place is the no-instances error
(RunPod's own message; the spot one differs, as RunPod's does).

Pod fields: everything QUERY_POD asks for, `runtime { uptimeInSeconds ports {ip isIpPublic
privatePort publicPort type} gpus {id} container {cpuPercent memoryPercent} }` (runtime is
null while the container is not running: queued, stopped, exited, interrupted), `machine
{ gpuDisplayName podHostId }`, `env` as RunPod returns it (a list of "KEY=value" strings).

Tests: tests/providers/runpod/test_fake_runpod.py
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.providers.runpod.fake_runpod_gql import GqlError
from tests.providers.runpod.runpod_pods import PodBox

NO_INSTANCES = (
    "There are no longer any instances available with the requested specifications. Please refresh and try again."
)
NO_SPOT_INSTANCES = "There are no instances available with the request specifications. Please try again later."
SPOT_RESUME = "Cannot resume a spot pod as an on demand pod."


@dataclass(frozen=True)
class GpuType:
    id: str
    display_name: str
    memory_gb: int
    secure_price: float
    community_price: float
    spot_price: float  # the minimum bid per GPU

    def as_object(self) -> dict[str, Any]:
        return {
            "__typename": "GpuType", "id": self.id, "displayName": self.display_name, "manufacturer": "Nvidia",
            "memoryInGb": self.memory_gb, "cudaCores": 0, "maxGpuCount": 8, "secureCloud": True,
            "communityCloud": True, "securePrice": self.secure_price, "communityPrice": self.community_price,
            "secureSpotPrice": self.spot_price, "communitySpotPrice": self.spot_price,
            "oneMonthPrice": None, "threeMonthPrice": None, "oneWeekPrice": None,
            "lowestPrice": lambda args: {
                "__typename": "LowestPrice", "minimumBidPrice": self.spot_price,
                "uninterruptablePrice": self.community_price, "stockStatus": "High",
                "gpuName": self.display_name, "maxUnreservedGpuCount": 8, "availableGpuCounts": [1, 2, 4, 8],
            },
        }  # fmt: skip


CATALOG = (
    GpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, 0.2),
    GpuType("NVIDIA RTX A4000", "RTX A4000", 16, 0.32, 0.17, 0.1),
    GpuType("NVIDIA A40", "A40", 48, 0.40, 0.35, 0.2),
    GpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69, 1.75),
)


def _scalars(names: str, **objects: str) -> dict[str, str | None]:
    return {**dict.fromkeys(names.split()), **objects}


SCHEMA: dict[str, dict[str, str | None]] = {
    "Query": {"myself": "User", "pod": "Pod", "gpuTypes": "GpuType"},
    "Mutation": {
        **dict.fromkeys(
            (
                "podFindAndDeployOnDemand",
                "deployCpuPod",
                "podRentInterruptable",
                "podStop",
                "podResume",
                "podBidResume",
            ),
            "Pod",
        ),
        "podTerminate": None,
    },
    "User": _scalars("id email pubKey clientBalance", pods="Pod", networkVolumes="NetworkVolume"),
    "NetworkVolume": _scalars("id name size dataCenterId"),
    "Pod": _scalars(
        "id name imageName env gpuCount costPerHr adjustedCostPerHr desiredStatus podType dockerArgs dockerId "
        "containerDiskInGb lastStatusChange machineId memoryInGb vcpuCount volumeInGb volumeMountPath port ports "
        "uptimeSeconds cloudType dataCenterId bidPerGpu interruptible",
        runtime="PodRuntime",
        machine="Machine",
    ),
    "Machine": _scalars("podHostId dataCenterId gpuDisplayName gpuTypeId secureCloud"),
    "PodRuntime": _scalars(
        "uptimeInSeconds", ports="PodRuntimePorts", gpus="PodRuntimeGpus", container="PodRuntimeContainer"
    ),
    "PodRuntimePorts": _scalars("ip isIpPublic privatePort publicPort type"),
    "PodRuntimeGpus": _scalars("id gpuUtilPercent memoryUtilPercent"),
    "PodRuntimeContainer": _scalars("cpuPercent memoryPercent"),
    "GpuType": _scalars(
        "id displayName manufacturer memoryInGb cudaCores maxGpuCount secureCloud communityCloud securePrice "
        "communityPrice secureSpotPrice communitySpotPrice oneMonthPrice threeMonthPrice oneWeekPrice",
        lowestPrice="LowestPrice",
    ),
    "LowestPrice": _scalars(
        "minimumBidPrice uninterruptablePrice stockStatus gpuName maxUnreservedGpuCount availableGpuCounts"
    ),
}


def new_id(length: int = 14) -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(length))


@dataclass
class PodRecord:
    """One pod of the account, as RunPod keeps it."""

    id: str
    request: dict[str, Any]  # the mutation's input, as parsed
    gpu: GpuType | None
    cloud_type: str
    data_center: str
    interruptible: bool
    bid: float | None
    box: PodBox
    status: str = "RUNNING"  # desiredStatus: RUNNING, EXITED, TERMINATED
    queued: bool = False
    machine_id: str = field(default_factory=lambda: new_id(12))
    last_status_change: str = field(default_factory=lambda: f"Rented by User: {time.ctime()}")

    @property
    def env(self) -> dict[str, str]:
        return {str(item["key"]): str(item["value"]) for item in self.request.get("env") or []}

    @property
    def gpu_count(self) -> int:
        return int(self.request.get("gpuCount") or 1) if self.gpu else 0

    @property
    def cost_per_hr(self) -> float:
        if self.gpu is None:
            return 0.06
        per_gpu = self.bid if self.bid is not None else (
            self.gpu.community_price if self.cloud_type == "COMMUNITY" else self.gpu.secure_price
        )  # fmt: skip
        return round(per_gpu * self.gpu_count, 3)

    def runtime(self) -> dict[str, Any] | None:
        if self.status != "RUNNING" or self.queued or not self.box.running:
            return None
        return {
            "__typename": "PodRuntime", "uptimeInSeconds": int(time.monotonic() - self.box.started_at),
            "ports": [{
                "__typename": "PodRuntimePorts", "ip": self.box.address, "isIpPublic": True, "privatePort": 22,
                "publicPort": self.box.ssh_port, "type": "tcp",
            }],
            "gpus": [{"__typename": "PodRuntimeGpus", "id": f"GPU-{self.id}-{n}", "gpuUtilPercent": 0,
                      "memoryUtilPercent": 0} for n in range(self.gpu_count)],
            "container": lambda args: dict(
                zip(("cpuPercent", "memoryPercent"), self.box.usage(), strict=True), __typename="PodRuntimeContainer"
            ),
        }  # fmt: skip

    def as_object(self) -> dict[str, Any]:
        request = self.request
        return {
            "__typename": "Pod", "id": self.id, "name": request.get("name"), "imageName": request.get("imageName"),
            "env": [f"{key}={value}" for key, value in self.env.items()], "gpuCount": self.gpu_count,
            "costPerHr": self.cost_per_hr, "adjustedCostPerHr": self.cost_per_hr, "desiredStatus": self.status,
            "podType": "INTERRUPTABLE" if self.interruptible else "RESERVED",
            "dockerArgs": request.get("dockerArgs", ""),
            "dockerId": None, "containerDiskInGb": request.get("containerDiskInGb"), "lastStatusChange":
            self.last_status_change, "machineId": self.machine_id, "memoryInGb": request.get("minMemoryInGb") or 15,
            "vcpuCount": request.get("minVcpuCount") or 4, "volumeInGb": request.get("volumeInGb") or 0,
            "volumeMountPath": request.get("volumeMountPath"), "port": None, "ports": request.get("ports") or "",
            "uptimeSeconds": int(time.monotonic() - self.box.started_at) if self.runtime() else 0,
            "runtime": lambda args: self.runtime(), "cloudType": self.cloud_type, "dataCenterId": self.data_center,
            "machine": {
                "__typename": "Machine", "podHostId": f"{self.id}-{self.machine_id[:8]}",
                "dataCenterId": self.data_center, "gpuDisplayName": self.gpu.display_name if self.gpu else None,
                "gpuTypeId": self.gpu.id if self.gpu else None,
                "secureCloud": self.cloud_type == "SECURE",
            },
            "bidPerGpu": self.bid, "interruptible": self.interruptible,
        }  # fmt: skip


def pod_id_of(args: dict[str, Any]) -> str:
    value = (args.get("input") or {}).get("podId")
    if not isinstance(value, str):
        raise GqlError('Field "PodFilter.podId" of required type "String!" was not provided.', status=400,
                       code="BAD_USER_INPUT")  # fmt: skip
    return value


Deploy = Callable[[dict[str, Any], bool], PodRecord]


def resolvers(account: Any) -> dict[str, dict[str, Callable[[dict[str, Any]], Any]]]:
    """The root fields, by operation kind; `account` is the FakeRunPod (its lock held)."""

    def pods(_: dict[str, Any]) -> list[dict[str, Any]]:
        return [pod.as_object() for pod in account.records.values()]

    def one_pod(args: dict[str, Any]) -> dict[str, Any] | None:
        pod = account.records.get(pod_id_of(args))
        return None if pod is None else pod.as_object()

    def gpu_types(args: dict[str, Any]) -> list[dict[str, Any]]:
        wanted = (args.get("input") or {}).get("id")
        return [gpu.as_object() for gpu in account.catalog if wanted in (None, gpu.id)]

    def existing(args: dict[str, Any]) -> PodRecord:
        pod = account.records.get(pod_id_of(args))
        if pod is None:
            raise GqlError("Pod not found")
        return pod  # type: ignore[no-any-return]

    def stop(args: dict[str, Any]) -> dict[str, Any]:
        pod = existing(args)
        account.stop_pod(pod, "EXITED")
        return pod.as_object()

    def resume(args: dict[str, Any], bid: bool = False) -> dict[str, Any]:
        pod = existing(args)
        if pod.interruptible and not bid:
            raise GqlError(SPOT_RESUME)
        if bid:
            pod.bid = float((args.get("input") or {}).get("bidPerGpu") or pod.bid or 0)
        account.resume_pod(pod)
        return pod.as_object()

    def terminate(args: dict[str, Any]) -> None:
        account.terminate(existing(args))

    myself = {
        "__typename": "User", "id": "user_fake", "pods": pods, "email": "fake@runpod.invalid",
        "networkVolumes": [], "pubKey": "", "clientBalance": 100.0,
    }  # fmt: skip
    return {
        "query": {"myself": lambda args: myself, "pod": one_pod, "gpuTypes": gpu_types},
        "mutation": {
            "podFindAndDeployOnDemand": lambda args: account.deploy(args.get("input") or {}, spot=False).as_object(),
            "deployCpuPod": lambda args: account.deploy(args.get("input") or {}, spot=False, cpu=True).as_object(),
            "podRentInterruptable": lambda args: account.deploy(args.get("input") or {}, spot=True).as_object(),
            "podStop": stop, "podResume": resume, "podBidResume": lambda args: resume(args, bid=True),
            "podTerminate": terminate,
        },
    }  # fmt: skip
