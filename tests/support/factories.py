"""Object factories for tests: Pod, Node and CustomResourceDefinition manifests and provider
`PodSpec`s, each with overrides (`make_pod(**overrides)`), so a test names only what it is about.

Used by every test folder and by the rigs in tests/support. Pure: no I/O, no cluster; the
defaults are the one place a test Pod's image, command and scheduling are spelled.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from kube import names
from providers.base import PodSpec


def make_pod(
    name: str = "p1",
    provider: str | None = None,
    *,
    namespace: str | None = None,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    command: Sequence[str] = ("sh", "-c", "sleep 300"),
    container: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> dict[str, Any]:
    """A Pod manifest with one container `main` (busybox running `command`).

    `provider` binds it to the virtual node `nebula-<provider>` through the scheduler (the
    nodeSelector and toleration a user writes); `container` overrides keys of `main`;
    `metadata`, `spec` and the other keywords override keys of the Pod's metadata and spec
    (`spec={"containers": [...]}` replaces `main`). Without `namespace` the metadata names none:
    the API server takes it from the path. `status`, when given, is the Pod's status as read back.
    """
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    main: dict[str, Any] = {"name": "main", "image": "busybox", "command": list(command), **(container or {})}
    body: dict[str, Any] = {"containers": [main]}
    if provider is not None:
        body["nodeSelector"] = {names.PROVIDER_KEY: provider}
        body["tolerations"] = [{"key": names.PROVIDER_KEY, "operator": "Exists"}]
    body.update(spec or {})
    body.update(spec_fields)
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, **(metadata or {})}, "spec": body}
    if status is not None:
        pod["status"] = status
    return pod


def make_node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    kubelet_port: int = 10250,
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Ready Node with an InternalIP and `kubelet_port` (what the virtual kubelet registers);
    `metadata` and `status` override keys of those parts, the other keywords keys of the spec."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, **(metadata or {})},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            **(status or {}),
        },
    }


def make_crd(
    kind: str,
    group: str,
    *,
    version: str = "v1",
    scope: str = "Namespaced",
    names: dict[str, Any] | None = None,
    **version_fields: Any,
) -> dict[str, Any]:
    """A CustomResourceDefinition serving `kind` (plural: lower-case `kind` + "s") in `group` at
    one stored `version`; `names` adds to spec.names (singular, shortNames), `version_fields` to
    the version (subresources, additionalPrinterColumns)."""
    plural = kind.lower() + "s"
    served = {"name": version, "served": True, "storage": True, **version_fields}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "kind": kind, **(names or {})},
            "versions": [served],
        },
    }


def make_pod_spec(**overrides: Any) -> PodSpec:
    """What a provider reads of a Pod, with a fresh uid; any field can be overridden."""
    values: dict[str, Any] = {"namespace": "ns", "name": "p", "uid": str(uuid.uuid4()), "container": "c", "image": "i"}
    values.update(overrides)
    return PodSpec(**values)
