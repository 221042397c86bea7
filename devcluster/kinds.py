"""Kind-specific defaulting and validation, as the real API server's strategies do them.

Pure functions over plain dicts, called by `resources.py` on create and update. They
mutate only the copy they are handed and never touch the store.
"""

from __future__ import annotations

import base64
from typing import Any

from devcluster.clone import clone
from devcluster.errors import Cause, invalid, invalid_value, required

TERMINAL_PHASES = ("Succeeded", "Failed")
DEFAULT_GRACE_SECONDS = 30
# What a Pod's status subresource takes from the body besides the status: podStatusStrategy
# resets only spec, ownerReferences and deletionTimestamp (unlike ResetObjectMetaForStatus).
POD_STATUS_METADATA = ("labels", "annotations", "finalizers")


def status_update(old: dict[str, Any], new: dict[str, Any], *, pod: bool) -> dict[str, Any]:
    """The object a write to the status subresource stores: `old` with `new`'s status and,
    for a Pod (`pod`), `new`'s labels, annotations and finalizers, as the real server does
    (kubelets and virtual kubelets write a Pod's annotations with its status in one write)."""
    merged = clone(old)
    if "status" in new:
        merged["status"] = new["status"]
    else:
        merged.pop("status", None)
    for key in POD_STATUS_METADATA if pod else ():
        if key in new["metadata"]:
            merged["metadata"][key] = new["metadata"][key]
        else:
            merged["metadata"].pop(key, None)
    return merged


def default_pod(pod: dict[str, Any]) -> None:
    """The defaults clients rely on (kubectl, the official client, the virtual kubelet)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            if isinstance(container, dict):
                _default_container(container)


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    image = str(container.get("image", ""))
    last = image.rsplit("/", 1)[-1]
    untagged_or_latest = "@" not in last and (":" not in last or last.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if untagged_or_latest else "IfNotPresent")


def validate_pod(pod: dict[str, Any]) -> None:
    name = pod["metadata"].get("name", "")
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        raise invalid("Pod", name, [required("spec.containers")])
    causes: list[Cause] = []
    for i, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("name"):
            causes.append(required(f"spec.containers[{i}].name"))
        if not isinstance(container, dict) or not container.get("image"):
            causes.append(required(f"spec.containers[{i}].image"))
    if causes:  # every field error at once, as the real validation returns its ErrorList
        raise invalid("Pod", name, causes)


def default_workload(obj: dict[str, Any]) -> None:
    """apps/v1 Deployment and ReplicaSet defaults (SetDefaults_Deployment/_ReplicaSet): one replica,
    a 25%/25% RollingUpdate, 10 old ReplicaSets kept, a 600 s progress deadline; the Pod
    template defaulted as a Pod is."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    if obj.get("kind") == "Deployment":
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    template = spec.get("template")
    if isinstance(template, dict):
        default_pod(template)


def validate_workload(obj: dict[str, Any]) -> None:
    """The checks of ValidateDeploymentSpec / ValidateReplicaSetSpec a user meets first:
    replicas >= 0, a selector that the template's labels match, a template with containers."""
    name, kind = obj["metadata"].get("name", ""), str(obj.get("kind"))
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    replicas = spec.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append(invalid_value("spec.replicas", replicas, "must be greater than or equal to 0"))
    raw_selector, raw_template = spec.get("selector"), spec.get("template")
    selector: dict[str, Any] = raw_selector if isinstance(raw_selector, dict) else {}
    template: dict[str, Any] = raw_template if isinstance(raw_template, dict) else {}
    match = selector.get("matchLabels") or {}
    if not (match or selector.get("matchExpressions")):
        causes.append(required("spec.selector"))
    labels = (template.get("metadata") or {}).get("labels") or {}
    if match and any(labels.get(k) != v for k, v in match.items()):
        shown = "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"
        detail = "`selector` does not match template `labels`"
        causes.append(Cause("spec.template.metadata.labels", "FieldValueInvalid", f"Invalid value: {shown}: {detail}"))
    containers = (template.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(required("spec.template.spec.containers"))
    else:
        for i, container in enumerate(containers):
            if not isinstance(container, dict) or not container.get("name"):
                causes.append(required(f"spec.template.spec.containers[{i}].name"))
            if not isinstance(container, dict) or not container.get("image"):
                causes.append(required(f"spec.template.spec.containers[{i}].image"))
    if causes:
        raise invalid(kind, name, causes, group="apps")


def initial_pod_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A created Pod's status is reset, as the real server does: Pending with its QoS class."""
    return {"phase": "Pending", "qosClass": qos_class(pod)}


def qos_class(pod: dict[str, Any]) -> str:
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    resources = [c.get("resources") or {} for c in containers]
    if not any((r.get("requests") or r.get("limits")) for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for res in ("cpu", "memory"):
            if res not in limits or requests.get(res, limits[res]) != limits[res]:
                return "Burstable"
    return "Guaranteed"


def pod_grace_seconds(pod: dict[str, Any], requested: int | None) -> int:
    """The grace a DELETE gets: none for an unbound or finished Pod (no kubelet will act)."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return 0
    if requested is not None:
        return max(0, requested)
    grace = spec.get("terminationGracePeriodSeconds")
    return grace if isinstance(grace, int) else DEFAULT_GRACE_SECONDS


def default_secret(secret: dict[str, Any]) -> None:
    """`type` defaults to Opaque; write-only `stringData` is merged into base64 `data`."""
    if not secret.get("type"):
        secret["type"] = "Opaque"
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = dict(secret.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data
    name = secret["metadata"].get("name", "")
    for key, value in (secret.get("data") or {}).items():
        try:
            base64.b64decode(str(value), validate=True)
        except ValueError:
            raise invalid("Secret", name, [invalid_value(f"data[{key}]", None, "illegal base64 data")]) from None


def default_namespace(namespace: dict[str, Any]) -> None:
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}
    labels = namespace["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/metadata.name", namespace["metadata"]["name"])


def default_service(service: dict[str, Any]) -> None:
    """type ClusterIP, sessionAffinity None; each port's protocol TCP and targetPort its port.
    No cluster IP is allocated: nothing here routes to one."""
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    name = service["metadata"].get("name", "")
    for i, port in enumerate(spec.get("ports") or []):
        if not isinstance(port, dict) or not isinstance(port.get("port"), int):
            raise invalid("Service", name, [required(f"spec.ports[{i}].port")])
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port["port"])


def crd_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    spec = crd.get("spec") or {}
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
        for t, r, m in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        )
    ]
    stored = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
    return {"acceptedNames": spec.get("names") or {}, "conditions": conditions, "storedVersions": stored}


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything a generation bump looks at: the object minus metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}
