"""Resource behaviour: what create, update, patch, delete and bind do to stored objects.

The HTTP layer calls `Resources`; it reads and writes `Store` under `Store.lock` so each
operation is atomic. Bookkeeping (uid, resourceVersion, generation, timestamps), finalizers,
graceful Pod deletion and owner-reference garbage collection live here. No HTTP, no sockets.
"""

from __future__ import annotations

import copy
import json
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from devcluster import crddefaults, csrkind, ephemeral, jobkind, kinds, patch
from devcluster.clone import clone
from devcluster.errors import ApiError, Cause, already_exists, bad_request, conflict, invalid, not_found, required
from devcluster.registry import Registry, ResourceType
from devcluster.store import Store

Clock = Callable[[], datetime]
Obj = dict[str, Any]

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_PATCH, JSON_PATCH, APPLY_PATCH)


def utcnow() -> datetime:
    return datetime.now(UTC)


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Resources:
    """The verbs of the API, applied to the store with the real server's semantics."""

    def __init__(self, store: Store, registry: Registry, *, clock: Clock = utcnow) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, namespace, name)
        if obj is None:
            raise not_found(rt.plural, name, group=rt.group)
        return crddefaults.defaulted(crddefaults.schema_of(self.store, rt), obj)

    def create(self, rt: ResourceType, namespace: str, body: Any, *, dry_run: bool = False) -> Obj:
        with self.store.lock:
            obj = self._prepare_new(rt, namespace, body)
            if self.store.get(rt.storage_key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]):
                raise already_exists(rt.plural, obj["metadata"]["name"], group=rt.group)
            if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io" and not dry_run:
                self.registry.register_crd(obj)
            return obj if dry_run else self.store.put(rt.storage_key, obj)

    def replace(
        self, rt: ResourceType, namespace: str, name: str, body: Any, *, subresource: str = "", dry_run: bool = False
    ) -> Obj:
        if subresource == ephemeral.SUBRESOURCE:
            ephemeral.refuse_old_kind(body)
        with self.store.lock:
            old = self.get(rt, namespace, name)
            new = self._checked_body(rt, namespace, body, name=name)
            return self._update(rt, old, new, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        raw: bytes,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Apply a patch; returns the result and whether it created the object (server-side apply)."""
        with self.store.lock:
            old = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
            if content_type == APPLY_PATCH:
                applied = load_yaml(raw)
                if old is None:
                    if subresource:
                        raise not_found(rt.plural, name, group=rt.group)
                    applied = self._checked_body(rt, namespace, applied, name=name)
                    return self.create(rt, namespace, applied, dry_run=dry_run), True
                new = self._merge(rt, old, applied, STRATEGIC_PATCH if rt.builtin else MERGE_PATCH)
            else:
                if old is None:
                    raise not_found(rt.plural, name, group=rt.group)
                new = self._merge(rt, old, load_json(raw), content_type)
            new = self._checked_body(rt, namespace, new, name=name)
            return self._update(rt, old, new, subresource=subresource, dry_run=dry_run), False

    def delete(
        self, rt: ResourceType, namespace: str, name: str, options: Obj | None = None, *, dry_run: bool = False
    ) -> Obj:
        """DELETE with DeleteOptions: preconditions, grace period, finalizers, propagation."""
        options = options or {}
        with self.store.lock:
            obj = self.get(rt, namespace if rt.namespaced else "", name)
            pre = options.get("preconditions") or {}
            meta = obj["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                detail = (
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}"
                )
                raise conflict(rt.plural, name, detail, group=rt.group)
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                detail = (
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
                )
                raise conflict(rt.plural, name, detail, group=rt.group)
            grace = options.get("gracePeriodSeconds")
            if grace is not None and not isinstance(grace, int):
                raise bad_request("gracePeriodSeconds must be an integer")
            orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents") is True
            return self._delete(rt, obj, grace, orphan=orphan, dry_run=dry_run)

    def bind(self, namespace: str, name: str, binding: Any) -> Obj:
        """POST pods/{name}/binding: what the scheduler does to assign a node."""
        pods = self.builtin("", "v1", "pods")
        target = (binding or {}).get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise invalid("Binding", name, [required("target.name")])
        with self.store.lock:
            pod = self.get(pods, namespace, name)
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                raise conflict("pods", name, f'pod {name} is already assigned to node "{bound}"')
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict("pods", name, f"pod {name} is being deleted, cannot be assigned to a host")
            return self.store.put(pods.storage_key, bound_pod(pod, node, timestamp(self.clock())))

    def builtin(self, group: str, version: str, plural: str) -> ResourceType:
        """A built-in type, which is always registered."""
        rt = self.registry.lookup(group, version, plural)
        assert rt is not None, f"built-in {plural} is always registered"
        return rt

    # -- internals ---------------------------------------------------------------------------

    def _checked_body(self, rt: ResourceType, namespace: str, body: Any, *, name: str | None = None) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        obj = clone(body)
        if obj.get("kind") not in (None, "", rt.kind):
            raise bad_request(f"the kind in the request body ({obj['kind']}) does not match the resource ({rt.kind})")
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        for key in [k for k, v in meta.items() if v is None]:
            del meta[key]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        if name is not None:
            meta["name"] = name
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        return obj

    def _prepare_new(self, rt: ResourceType, namespace: str, body: Any) -> Obj:
        obj = self._checked_body(rt, namespace, body)
        meta = obj["metadata"]
        if not meta.get("name"):
            if not meta.get("generateName"):
                cause = required("metadata.name", "name or generateName is required")
                raise invalid(rt.kind, "", [cause], group=rt.group)
            suffix = "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        if rt.namespaced and self.store.get("/namespaces", "", namespace) is None:
            raise not_found("namespaces", namespace)
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(transient, None)
        now = timestamp(self.clock())
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now
        if "spec" in obj or not rt.builtin:
            meta["generation"] = 1
        self._default(rt, obj, now)
        if rt.status_subresource and rt.kind not in ("Node", "Namespace", "Pod", "CustomResourceDefinition"):
            obj.pop("status", None)
        return obj

    def _default(self, rt: ResourceType, obj: Obj, now: str) -> None:
        if not rt.builtin:
            crddefaults.apply_to(self.store, rt, obj)
            return
        if rt.kind == "Pod":
            ephemeral.validate_new_pod(obj)
            kinds.default_pod(obj)
            obj["status"] = kinds.initial_pod_status(obj)
        elif rt.kind == "Secret":
            kinds.default_secret(obj)
        elif rt.kind == "Namespace":
            kinds.default_namespace(obj)
        elif rt.kind == "Service":
            kinds.default_service(obj)
        elif rt.group == "apps" and rt.kind in ("Deployment", "ReplicaSet"):
            kinds.default_workload(obj)
            kinds.validate_workload(obj)
        elif csrkind.is_csr(rt.kind, rt.group):
            csrkind.validate_new(obj)
        elif jobkind.is_job(rt.kind, rt.group):
            jobkind.prepare_new(obj)
        elif rt.kind == "CustomResourceDefinition":
            self.registry.check_crd(obj)
            obj["status"] = kinds.crd_status(obj, now)

    def _merge(self, rt: ResourceType, old: Obj, body: Any, content_type: str) -> Any:
        try:
            if content_type == MERGE_PATCH:
                return patch.json_merge_patch(old, body)
            if content_type == STRATEGIC_PATCH:
                if not rt.builtin:
                    raise ApiError(
                        415, "strategic merge patch is not supported for custom resources; use a merge patch"
                    )
                if not isinstance(body, dict):
                    raise bad_request("a strategic merge patch must be a JSON object")
                return patch.strategic_merge_patch(old, body, rt.kind)
            if content_type == JSON_PATCH:
                if not isinstance(body, list):
                    raise bad_request("a JSON patch must be a JSON array of operations")
                return patch.json_patch(old, body)
        except patch.PatchError as err:
            cause = Cause("", "FieldValueInvalid", str(err))
            raise invalid(rt.kind, old["metadata"]["name"], [cause], group=rt.group) from None
        raise ApiError(415, f"the media type {content_type!r} is not supported for PATCH")

    def _update(self, rt: ResourceType, old: Obj, new: Obj, *, subresource: str, dry_run: bool) -> Obj:
        name = old["metadata"]["name"]
        sent_rv = new["metadata"].get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"].get("resourceVersion"):
            raise conflict(
                rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
                group=rt.group,
            )
        if csrkind.is_csr(rt.kind, rt.group):
            new = csrkind.prepare_update(old, new, subresource=subresource, now=timestamp(self.clock()))
            new = new if subresource else self._keep_system_fields(rt, old, new)
        elif subresource == "status":
            new = kinds.status_update(old, new, pod=rt.kind == "Pod" and rt.builtin)
        elif subresource == ephemeral.SUBRESOURCE:
            new = ephemeral.merge_update(old, new)
            kinds.default_pod(new)
        else:
            new = self._keep_system_fields(rt, old, new)
            if rt.kind == "Pod" and rt.builtin:
                ephemeral.refuse_main_change(old, new)
            if jobkind.is_job(rt.kind, rt.group):
                jobkind.prepare_update(old, new, subresource=subresource)
        if not rt.builtin:
            crddefaults.apply_to(self.store, rt, new)
        if _same(old, new):
            return old
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            return old if dry_run else self._remove(rt, old, orphan=False)
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self.registry.check_crd(new)
            if not dry_run:
                self.registry.register_crd(new)
        return new if dry_run else self.store.put(rt.storage_key, new)

    def _keep_system_fields(self, rt: ResourceType, old: Obj, new: Obj) -> Obj:
        meta, old_meta = new["metadata"], old["metadata"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if rt.status_subresource:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        if rt.kind == "Secret" and rt.builtin:
            kinds.default_secret(new)
        if rt.kind == "Pod" and rt.builtin:
            kinds.validate_pod(new)
            kinds.default_pod(new)
        if rt.group == "apps" and rt.kind in ("Deployment", "ReplicaSet") and rt.builtin:
            kinds.default_workload(new)
            kinds.validate_workload(new)
        generation = old_meta.get("generation")
        if generation is not None:
            changed = kinds.spec_of(old) != kinds.spec_of(new)
            meta["generation"] = generation + 1 if changed else generation
        return new

    def _delete(self, rt: ResourceType, obj: Obj, grace: int | None, *, orphan: bool, dry_run: bool) -> Obj:
        meta = obj["metadata"]
        if rt.kind == "Pod" and rt.builtin:
            grace = kinds.pod_grace_seconds(obj, grace)
        else:
            grace = 0
        if grace == 0 and not meta.get("finalizers"):
            return obj if dry_run else self._remove(rt, obj, orphan=orphan)
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current is not None and current <= grace:
            return obj
        marked = clone(obj)
        marked["metadata"]["deletionTimestamp"] = timestamp(self.clock() + timedelta(seconds=grace))
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        return marked if dry_run else self.store.put(rt.storage_key, marked)

    def _remove(self, rt: ResourceType, obj: Obj, *, orphan: bool) -> Obj:
        """Remove for good, then what the real controllers would do: CRD and namespace content, GC."""
        meta = obj["metadata"]
        gone = self.store.remove(rt.storage_key, meta.get("namespace", ""), meta["name"])
        assert gone is not None
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            for storage_key in {served.storage_key for served in self.registry.unregister_crd(obj)}:  # one per CRD
                for item in self.store.list_objects(storage_key)[0]:
                    self.store.remove(storage_key, item["metadata"].get("namespace", ""), item["metadata"]["name"])
        if rt.kind == "Namespace" and rt.builtin:
            for key, item in self.store.all_objects():
                if item["metadata"].get("namespace") == meta["name"]:
                    self.store.remove(key, meta["name"], item["metadata"]["name"])
        if not orphan and meta.get("uid"):
            self._collect_garbage(meta["uid"])
        return gone

    def _collect_garbage(self, removed: str) -> None:
        """Background propagation: delete each dependent of the removed uid whose owners are
        now all gone (each such delete collects its own dependents in turn)."""
        if self.store.uid_exists(removed):
            return
        for key, obj in self.store.dependents(removed):
            owners = obj["metadata"].get("ownerReferences") or []
            uids = [o["uid"] for o in owners if isinstance(o, dict) and isinstance(o.get("uid"), str)]
            if any(self.store.uid_exists(uid) for uid in uids) or obj["metadata"].get("deletionTimestamp"):
                continue
            rt = self.registry.by_storage_key(key)
            meta = obj["metadata"]
            current = self.store.get(key, meta.get("namespace", ""), meta["name"])
            if rt is not None and current is not None:
                self._delete(rt, current, None, orphan=False, dry_run=False)


def bound_pod(pod: Obj, node: str, now: str) -> Obj:
    """The Pod after a Binding: nodeName set and PodScheduled=True."""
    bound = copy.deepcopy(pod)
    bound.setdefault("spec", {})["nodeName"] = node
    status = bound.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
    status["conditions"] = conditions
    return bound


def _same(old: Obj, new: Obj) -> bool:
    a = {**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}}
    b = {**new, "metadata": {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}}
    return a == b


def load_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"the request body is invalid JSON: {err}") from None


def load_yaml(raw: bytes) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise bad_request(f"the request body is invalid YAML: {err}") from None
