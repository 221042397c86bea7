"""The Job controller of the embedded cluster, as kube-controller-manager's (1.31+) behaves.

`DevCluster` runs one `JobController` thread (next to the apps controller). Each pass syncs
every Job: it counts finished Pods through `status.uncountedTerminatedPods` and the
`batch.kubernetes.io/job-tracking` finalizer, applies podFailurePolicy, backoffLimit (with
the Pod-failure back-off, base `backoff_base`), activeDeadlineSeconds and suspend, creates
Pods through the mutating webhooks (as the apps controller does), writes the conditions
(SuccessCriteriaMet then Complete, FailureTarget then Failed) and Events, and deletes a
finished Job after ttlSecondsAfterFinished. The rules are `jobstatus`; writes go only
through `Resources`. NonIndexed only (Indexed is refused at create by `jobkind`).
Tests: tests/devcluster/test_jobs.py::test_a_job_of_three_completions_completes,
tests/devcluster/test_jobs.py::test_backoff_limit_fails_the_job_and_deletes_active_pods.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from devcluster import admission
from devcluster import jobstatus as rules
from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.resources import MERGE_PATCH, Resources, timestamp
from devcluster.watch import Change

log = logging.getLogger(__name__)

JOBS, PODS = "batch/jobs", "/pods"
Obj = dict[str, Any]


def _owner_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("kind") == "Job":
            return str(ref.get("uid"))
    return None


def _parse(stamp: Any) -> datetime | None:
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None


class JobController(ControlLoop):
    name = "devcluster-jobs"

    def __init__(
        self, resources: Resources, *, interval: float = 1.0, backoff_base: float = rules.DEFAULT_BACKOFF
    ) -> None:
        super().__init__(resources, interval=interval)
        self.idle_interval = interval
        # DefaultJobPodFailureBackOff (10 s); tests lower it. The cap stays MAX_BACKOFF.
        self.backoff_base = backoff_base
        self.monotonic: Callable[[], float] = time.monotonic
        self._backoff: dict[str, rules.BackoffRecord] = {}
        self._not_failures: set[str] = set()  # Pods this controller deleted that do not count as failed
        self._due: float | None = None

    def wants(self, change: Change) -> bool:
        return change.storage_key == JOBS or (change.storage_key == PODS and _owner_uid(change.obj) is not None)

    def run_once(self) -> None:
        self._due = None
        jobs, _ = self.resources.store.list_objects(JOBS)
        pods = self.resources.store.list_owned(PODS)  # a Pod no Job owns is not this controller's
        owned: dict[str, list[Obj]] = {}
        for pod in pods:
            uid = _owner_uid(pod)
            if uid is not None:
                owned.setdefault(uid, []).append(pod)
        for job in jobs:
            try:
                self._sync(job, owned.pop(job["metadata"]["uid"], []))
            except ApiError as exc:  # a conflict or a vanished object: the next pass sees the new state
                log.debug("job %s: %s", job["metadata"]["name"], exc.message)
        for orphans in owned.values():  # the Job is gone: nothing will count these any more
            self._release([p for p in orphans if rules.TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])])
        live = {job["metadata"]["uid"] for job in jobs}
        self._backoff = {uid: record for uid, record in self._backoff.items() if uid in live}
        # The next pass comes at the earliest back-off or deadline, or after the idle interval.
        self.interval = self.idle_interval if self._due is None else max(0.01, min(self.idle_interval, self._due))

    def _requeue(self, seconds: float) -> None:
        self._due = seconds if self._due is None else min(self._due, seconds)

    # -- one Job -----------------------------------------------------------------------------------
    def _sync(self, job: Obj, pods: list[Obj]) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        now = self.resources.clock()
        stamp = timestamp(now)
        status = copy.deepcopy(job.get("status") or {})
        uncounted = status.get("uncountedTerminatedPods") or {}
        pending_ok, pending_bad = list(uncounted.get("succeeded") or []), list(uncounted.get("failed") or [])
        record = self._backoff.setdefault(meta["uid"], rules.BackoffRecord())
        tracked = [p for p in pods if rules.TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])]
        new_ok: list[Obj] = []
        new_bad: list[Obj] = []
        ignored: list[Obj] = []
        fail_job: str | None = None
        for pod in tracked:
            uid = pod["metadata"]["uid"]
            if uid in pending_ok or uid in pending_bad:
                continue
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                new_ok.append(pod)
            elif uid in self._not_failures and pod["metadata"].get("deletionTimestamp"):
                ignored.append(pod)
            elif rules.is_failed(pod, job):
                matched = rules.match_failure_policy(job, pod) if spec.get("podFailurePolicy") else None
                if matched is not None and matched[0] == "Ignore":
                    ignored.append(pod)
                    continue
                if matched is not None and matched[0] == "FailJob" and fail_job is None:
                    fail_job = matched[1]
                new_bad.append(pod)
        record.observe(succeeded=len(new_ok), failed=len(new_bad), now=self.monotonic())
        active = [p for p in pods if rules.is_active(p)]
        terminating = [p for p in pods if rules.is_terminating(p)]
        succeeded = int(status.get("succeeded") or 0) + len(pending_ok) + len(new_ok)
        failed = int(status.get("failed") or 0) + len(pending_bad) + len(new_bad)
        done = rules.finished(status)
        target = rules.is_true(status, "FailureTarget") or rules.is_true(status, "SuccessCriteriaMet")
        if not done and not target:
            self._decide(job, status, stamp, fail_job, succeeded=succeeded, failed=failed, active=active)
        doomed: list[Obj] = []
        if rules.is_true(status, "FailureTarget") and not done:  # deleted active Pods count as failed
            doomed, new_bad, active = active, new_bad + active, []
            failed += len(doomed)
        elif not done:
            if rules.is_true(status, "SuccessCriteriaMet"):
                doomed, active = active, []
            else:
                active, doomed = self._manage(job, status, stamp, active, terminating, succeeded, record)
            ignored = ignored + doomed
            self._not_failures.update(p["metadata"]["uid"] for p in doomed)
        for pod in doomed:
            self._delete_pod(job, pod)
        uncounted_ok = pending_ok + [p["metadata"]["uid"] for p in new_ok]
        uncounted_bad = pending_bad + [p["metadata"]["uid"] for p in new_bad]
        status["uncountedTerminatedPods"] = {
            k: v for k, v in (("succeeded", uncounted_ok), ("failed", uncounted_bad)) if v
        }
        status.update(active=len(active), ready=sum(map(rules.is_ready, active)), terminating=len(terminating))
        job = self._write_status(job, status)
        self._release(new_ok + new_bad + ignored)
        status = copy.deepcopy(job.get("status") or {})
        status.update(succeeded=succeeded, failed=failed, uncountedTerminatedPods={})
        if not done:
            self._finish(job, status, stamp, bool(terminating) or bool(doomed))
        job = self._write_status(job, status)
        self._expire(job, now)

    def _decide(self, job: Obj, status: Obj, stamp: str, fail_job: str | None, **counts: Any) -> None:
        """Set FailureTarget or SuccessCriteriaMet when the Job's outcome is decided."""
        spec = job.get("spec") or {}
        active: list[Obj] = counts["active"]
        reason: tuple[str, str] | None = None
        if fail_job is not None:
            reason = (rules.POD_FAILURE_POLICY, fail_job)
        elif counts["failed"] > int(spec.get("backoffLimit", 6)) or rules.restarts_past_limit(job, active):
            reason = rules.BACKOFF_LIMIT_EXCEEDED
        elif spec.get("activeDeadlineSeconds") is not None and status.get("startTime") and not spec.get("suspend"):
            start = _parse(status["startTime"])
            assert start is not None
            left = (
                start + timedelta(seconds=int(spec["activeDeadlineSeconds"])) - self.resources.clock()
            ).total_seconds()
            if left <= 0:
                reason = rules.DEADLINE_EXCEEDED
            else:
                self._requeue(left)
        if reason is not None:
            rules.set_condition(status, rules.condition("FailureTarget", *reason, stamp))
        elif rules.success_reached(job, counts["succeeded"], len(active)):
            rules.set_condition(status, rules.condition("SuccessCriteriaMet", *rules.COMPLETIONS_REACHED, stamp))

    def _manage(
        self,
        job: Obj,
        status: Obj,
        stamp: str,
        active: list[Obj],
        terminating: list[Obj],
        succeeded: int,
        record: rules.BackoffRecord,
    ) -> tuple[list[Obj], list[Obj]]:
        """Suspend/resume, startTime, and Pod creation or deletion; returns (active, deleted)."""
        spec = job.get("spec") or {}
        if spec.get("suspend"):
            if rules.set_condition(status, rules.condition("Suspended", "JobSuspended", "Job suspended", stamp)):
                self._event(job, "Normal", "Suspended", "Job suspended")
            status.pop("startTime", None)
            return [], active
        suspended = rules.find_condition(status, "Suspended")
        if suspended is not None and suspended.get("status") == "True":
            rules.set_condition(status, rules.condition("Suspended", "JobResumed", "Job resumed", stamp, "False"))
            self._event(job, "Normal", "Resumed", "Job resumed")
            status["startTime"] = stamp
        status.setdefault("startTime", stamp)
        busy = len(active) + (len(terminating) if rules.only_replace_failed(job) else 0)
        want = rules.wanted_active(job, succeeded)
        if busy > want:
            extra = sorted(
                active,
                key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), p["metadata"].get("creationTimestamp")),
            )[: busy - want]
            return [p for p in active if p not in extra], extra
        if busy < want:
            wait = record.remaining(self.monotonic(), base=self.backoff_base)
            if wait > 0:
                self._requeue(wait)
                return active, []
            for _ in range(want - busy):
                pod = self._create_pod(job)
                if pod is None:
                    break
                active.append(pod)
        return active, []

    def _finish(self, job: Obj, status: Obj, stamp: str, waiting: bool) -> None:
        """Complete or Failed once every Pod is terminal, after its target condition."""
        if waiting:
            return
        target = rules.find_condition(status, "FailureTarget")
        if target is not None and target.get("status") == "True":
            reason, message = str(target.get("reason")), str(target.get("message"))
            rules.set_condition(status, rules.condition("Failed", reason, message, stamp))
            self._event(job, "Warning", reason, message)
        elif rules.is_true(status, "SuccessCriteriaMet"):
            rules.set_condition(status, rules.condition("Complete", *rules.COMPLETIONS_REACHED, stamp))
            status["completionTime"] = stamp
            self._event(job, "Normal", "Completed", "Job completed")

    def _expire(self, job: Obj, now: datetime) -> None:
        """ttlSecondsAfterFinished: delete the finished Job, its Pods in the background."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        status = job.get("status") or {}
        if ttl is None or not rules.finished(status):
            return
        end = next((c for c in status.get("conditions") or [] if c.get("type") in ("Complete", "Failed")), None)
        finished_at = _parse((end or {}).get("lastTransitionTime")) or now
        left = (finished_at + timedelta(seconds=int(ttl)) - now).total_seconds()
        if left > 0:
            self._requeue(left)
            return
        meta = job["metadata"]
        options = {"propagationPolicy": "Background", "preconditions": {"uid": meta["uid"]}}
        self.resources.delete(self._rt("batch", "jobs"), meta["namespace"], meta["name"], options)

    # -- writes ------------------------------------------------------------------------------------
    def _create_pod(self, job: Obj) -> Obj | None:
        meta = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        template_meta = template.get("metadata") or {}
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        pod_meta: Obj = {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": template_meta.get("labels") or {},
            "ownerReferences": [owner],
            "finalizers": [rules.TRACKING_FINALIZER],
        }
        if template_meta.get("annotations"):
            pod_meta["annotations"] = template_meta["annotations"]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}
        try:
            body = admission.admit_pod(self.resources.store, meta["namespace"], body)
            pod = self.resources.create(self._rt("", "pods"), meta["namespace"], body)
        except ApiError as exc:
            log.warning("job %s/%s: creating a Pod failed: %s", meta["namespace"], meta["name"], exc.message)
            self._event(job, "Warning", "FailedCreate", f"Error creating: {exc.message}")
            return None
        self._event(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        return pod

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.resources.delete(self._rt("", "pods"), meta["namespace"], meta["name"])
        except ApiError as exc:
            log.debug("job pod delete skipped: %s", exc.message)
            return
        self._event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    def _release(self, pods: list[Obj]) -> None:
        """Remove the tracking finalizer: the Pod is counted (or never will be)."""
        for pod in pods:
            meta = pod["metadata"]
            current = self.resources.store.get(PODS, meta["namespace"], meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                continue
            finalizers = [f for f in current["metadata"].get("finalizers") or [] if f != rules.TRACKING_FINALIZER]
            body = json.dumps({"metadata": {"finalizers": finalizers or None}}).encode()
            try:
                self.resources.patch(self._rt("", "pods"), meta["namespace"], meta["name"], MERGE_PATCH, body)
            except ApiError as exc:
                log.debug("job pod finalizer removal skipped: %s", exc.message)
            self._not_failures.discard(meta["uid"])

    def _write_status(self, job: Obj, status: Obj) -> Obj:
        for key in ("active", "succeeded", "failed"):  # int32 omitempty; ready and terminating are pointers
            if not status.get(key):
                status.pop(key, None)
        if status == (job.get("status") or {}):
            return job
        meta = job["metadata"]
        body = dict(copy.deepcopy(job), status=status)
        return self.resources.replace(
            self._rt("batch", "jobs"), meta["namespace"], meta["name"], body, subresource="status"
        )

    def _event(self, job: Obj, kind: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        now = timestamp(self.resources.clock())
        event = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {
                "kind": "Job",
                "apiVersion": "batch/v1",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "job-controller"},
            "reportingComponent": "job-controller",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.resources.create(self._rt("", "events"), meta["namespace"], event)
        except ApiError as exc:
            log.debug("job event skipped: %s", exc.message)

    def _rt(self, group: str, plural: str) -> Any:
        return self.resources.builtin(group, "v1", plural)
