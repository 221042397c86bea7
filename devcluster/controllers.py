"""A minimal Deployment -> ReplicaSet -> Pods controller, so "a Deployment of Pods" works here.

`DevCluster` runs one `AppsController` thread. It wakes on Deployment, ReplicaSet or Pod
changes (or every `interval`): a Deployment owns one ReplicaSet per pod template (older ones
scaled to 0); a ReplicaSet keeps `replicas` active Pods (not Failed, Succeeded or deleting),
creating them through the mutating webhooks as the real controller's API calls would.
Status counts and conditions come from `appstatus` (ready means the Pod's Ready condition).
Writes only through `Resources`; no rollout strategy, no surge, no minReadySeconds.
Tests: tests/devcluster/test_controllers_apps.py, tests/devcluster/test_scale.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import uuid
from typing import Any

from devcluster import admission, appstatus
from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.resources import Resources, timestamp
from devcluster.watch import Change

log = logging.getLogger(__name__)

DEPLOYMENTS, REPLICASETS, PODS = "apps/deployments", "apps/replicasets", "/pods"
TEMPLATE_HASH = "pod-template-hash"
Obj = dict[str, Any]


def _controller_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return str(ref.get("uid"))
    return None


def _owner_ref(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _is_active(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def template_hash(template: Any) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return digest[:10]


class AppsController(ControlLoop):
    name = "devcluster-apps"

    def __init__(self, resources: Resources, *, interval: float = 1.0) -> None:
        super().__init__(resources, interval=interval)

    def wants(self, change: Change) -> bool:
        return change.storage_key in (DEPLOYMENTS, REPLICASETS) or (
            change.storage_key == PODS and _controller_uid(change.obj) is not None
        )

    def run_once(self) -> None:
        self.sync_once()

    def sync_once(self) -> None:
        store = self.resources.store
        deployments, _ = store.list_objects(DEPLOYMENTS)
        for deployment in deployments:
            self._sync_deployment(deployment)
        replicasets, _ = store.list_objects(REPLICASETS)
        pods = store.list_owned(PODS)  # a Pod no ReplicaSet owns is not this controller's
        owned: dict[str, list[Obj]] = {}
        for pod in pods:
            uid = _controller_uid(pod)
            if uid is not None:
                owned.setdefault(uid, []).append(pod)
        for replicaset in replicasets:
            self._sync_replicaset(replicaset, owned.get(replicaset["metadata"]["uid"], []))

    # -- Deployments ---------------------------------------------------------------------------
    def _sync_deployment(self, deployment: Obj) -> None:
        if deployment["metadata"].get("deletionTimestamp"):
            return
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        template = spec.get("template") or {}
        digest = template_hash(template)
        name = f"{meta['name']}-{digest}"
        replicas = int(spec.get("replicas", 1))
        rs_type = self._rt("replicasets")
        replicasets, _ = self.resources.store.list_objects(REPLICASETS, meta["namespace"])
        mine = [rs for rs in replicasets if _controller_uid(rs) == meta["uid"]]
        current = next((rs for rs in mine if rs["metadata"]["name"] == name), None)
        if current is None:
            labels = {**((template.get("metadata") or {}).get("labels") or {}), TEMPLATE_HASH: digest}
            pod_template = copy.deepcopy(template)
            pod_template.setdefault("metadata", {})["labels"] = labels
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})[TEMPLATE_HASH] = digest
            body = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": name, "labels": labels, "ownerReferences": [_owner_ref(deployment)]},
                "spec": {"replicas": replicas, "selector": selector, "template": pod_template},
            }
            self._write(lambda: self.resources.create(rs_type, meta["namespace"], body))
        elif (current.get("spec") or {}).get("replicas") != replicas:
            self._scale(current, replicas)
        for old in mine:
            if old["metadata"]["name"] != name and (old.get("spec") or {}).get("replicas") != 0:
                self._scale(old, 0)
        now = timestamp(self.resources.clock())
        status = appstatus.deployment_status(deployment, current, mine, now=now)
        self._set_status("deployments", deployment, status)

    def _scale(self, replicaset: Obj, replicas: int) -> None:
        body = copy.deepcopy(replicaset)
        body["spec"]["replicas"] = replicas
        meta = replicaset["metadata"]
        self._write(lambda: self.resources.replace(self._rt("replicasets"), meta["namespace"], meta["name"], body))

    # -- ReplicaSets ---------------------------------------------------------------------------
    def _sync_replicaset(self, replicaset: Obj, pods: list[Obj]) -> None:
        meta, spec = replicaset["metadata"], replicaset.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        active = [p for p in pods if _is_active(p)]
        want = int(spec.get("replicas", 1))
        for _ in range(want - len(active)):
            if not self._create_pod(replicaset):
                break
        if len(active) > want:
            # Unbound Pods go first, then the newest, as the real controller prefers.
            doomed = sorted(
                active,
                key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), p["metadata"].get("creationTimestamp")),
            )
            doomed = sorted(doomed[: len(active) - want], key=lambda p: p["metadata"]["name"])
            for pod in doomed:
                pod_meta = pod["metadata"]
                self._write(lambda m=pod_meta: self.resources.delete(self._rt("pods"), m["namespace"], m["name"]))
        self._set_status("replicasets", replicaset, appstatus.replicaset_status(replicaset, active))

    def _create_pod(self, replicaset: Obj) -> bool:
        meta = replicaset["metadata"]
        template = copy.deepcopy((replicaset.get("spec") or {}).get("template") or {})
        pod_meta = template.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": pod_meta.get("labels") or {},
                "annotations": pod_meta.get("annotations") or {},
                "ownerReferences": [_owner_ref(replicaset)],
            },
            "spec": template.get("spec") or {},
        }
        try:
            body = admission.admit_pod(self.resources.store, meta["namespace"], body)
            self.resources.create(self._rt("pods"), meta["namespace"], body)
        except ApiError as exc:
            self._failed_create(replicaset, exc.message)
            return False
        return True

    # -- writes ---------------------------------------------------------------------------------
    def _failed_create(self, replicaset: Obj, message: str) -> None:
        meta = replicaset["metadata"]
        log.warning("replicaset %s/%s: creating a Pod failed: %s", meta["namespace"], meta["name"], message)
        now = timestamp(self.resources.clock())
        event = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {"kind": "ReplicaSet", "apiVersion": "apps/v1", "name": meta["name"], "uid": meta["uid"]},
            "reason": "FailedCreate",
            "message": f"Error creating: {message}",
            "type": "Warning",
            "source": {"component": "replicaset-controller"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._write(lambda: self.resources.create(self._rt("events"), meta["namespace"], event))

    def _set_status(self, plural: str, obj: Obj, status: Obj) -> None:
        """The whole status is the controller's: a count that went to zero is dropped, not kept."""
        if (obj.get("status") or {}) == status:
            return
        meta = obj["metadata"]
        body = dict(copy.deepcopy(obj), status=status)
        self._write(
            lambda: self.resources.replace(
                self._rt(plural), meta["namespace"], meta["name"], body, subresource="status"
            )
        )

    def _write(self, call: Any) -> None:
        try:
            call()
        except ApiError as exc:  # a conflict or a vanished object: the next pass sees the new state
            log.debug("apps controller write skipped: %s", exc.message)

    def _rt(self, plural: str) -> Any:
        return self.resources.builtin("apps" if plural in ("deployments", "replicasets") else "", "v1", plural)
