"""The Job controller's pure rules: which Pods are active, finished or terminating, the
podFailurePolicy match, the Pod-failure back-off, and the conditions as the real
kube-controller-manager (1.31+) writes them.

Pure functions over plain dicts (the clock is a parameter); `devcluster.jobs` calls them and
does every write. Tests: tests/devcluster/test_jobs_rules.py::test_backoff_doubles_from_the_base_and_is_capped,
tests/devcluster/test_jobs_rules.py::test_pod_failure_policy_matches_exit_codes_and_conditions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
DEFAULT_BACKOFF = 10.0  # seconds: DefaultJobPodFailureBackOff
MAX_BACKOFF = 360.0  # seconds: the documented six-minute cap
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
POD_FAILURE_POLICY = "PodFailurePolicy"
Obj = dict[str, Any]


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_active(pod: Obj) -> bool:
    """Counted in status.active: neither finished nor being deleted."""
    return not is_terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def is_terminating(pod: Obj) -> bool:
    return not is_terminal(pod) and bool(pod["metadata"].get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def only_replace_failed(job: Obj) -> bool:
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def is_failed(pod: Obj, job: Obj) -> bool:
    """isPodFailed: phase Failed; or, unless only Failed Pods are replaced, being deleted
    before it succeeded. An unscheduled Pod being deleted counts too (PodGC would fail it)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    deleting = bool(pod["metadata"].get("deletionTimestamp")) and phase != "Succeeded"
    if only_replace_failed(job):
        return deleting and not (pod.get("spec") or {}).get("nodeName")
    return deleting


def match_failure_policy(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first podFailurePolicy rule a failed Pod matches, else None."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    meta = pod["metadata"]
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    status = pod.get("status") or {}
    for index, rule in enumerate(rules):
        action = str(rule.get("action"))
        codes = rule.get("onExitCodes")
        if codes is not None:
            hit = _exit_code_match(codes, status)
            if hit is not None:
                container, code = hit
                return action, (
                    f"Container {container} for pod {who} failed with exit code {code} "
                    f"matching {action} rule at index {index}"
                )
            continue
        for pattern in rule.get("onPodConditions") or []:
            wanted = pattern.get("status", "True")
            for condition in status.get("conditions") or []:
                if condition.get("type") == pattern.get("type") and condition.get("status") == wanted:
                    return action, f"Pod {who} has condition {pattern['type']} matching {action} rule at index {index}"
    return None


def _exit_code_match(codes: Obj, status: Obj) -> tuple[str, int] | None:
    values = set(codes.get("values") or [])
    operator, only = codes.get("operator"), codes.get("containerName")
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if only and container.get("name") != only:
            continue
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if not isinstance(code, int) or code == 0:
            continue
        if (operator == "In") == (code in values):
            return str(container.get("name")), code
    return None


def restarts_past_limit(job: Obj, active: list[Obj]) -> bool:
    """pastBackoffLimitOnFailure: with restartPolicy OnFailure, container restarts of the
    active Pods count against backoffLimit."""
    spec = job.get("spec") or {}
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in active:
        status = pod.get("status") or {}
        for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            restarts += int(container.get("restartCount") or 0)
    limit = int(spec.get("backoffLimit", 6))
    return restarts > 0 if limit == 0 else restarts >= limit


@dataclass
class BackoffRecord:
    """backoffRecord: failed Pods since the last success, and when the last one was seen (s)."""

    failures_after_success: int = 0
    last_failure: float = 0.0

    def observe(self, *, succeeded: int, failed: int, now: float) -> None:
        if succeeded:
            self.failures_after_success = 0
        if failed:
            self.failures_after_success += failed
            self.last_failure = now

    def remaining(self, now: float, *, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
        """Seconds before a replacement Pod may be created: base * 2^(failures-1), capped."""
        if self.failures_after_success == 0:
            return 0.0
        delay = min(cap, base * float(2 ** min(self.failures_after_success - 1, 32)))
        return max(0.0, delay - (now - self.last_failure))


def condition(kind: str, reason: str, message: str, now: str, status: str = "True") -> Obj:
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def find_condition(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    found = find_condition(status, kind)
    return found is not None and found.get("status") == "True"


def set_condition(status: Obj, new: Obj) -> bool:
    """Add or update a condition; the transition time moves only when the status flips."""
    conditions = status.setdefault("conditions", [])
    for i, old in enumerate(conditions):
        if old.get("type") == new["type"]:
            if old.get("status") == new["status"] and old.get("reason") == new["reason"]:
                return False
            conditions[i] = new
            return True
    conditions.append(new)
    return True


def finished(status: Obj) -> bool:
    return is_true(status, "Complete") or is_true(status, "Failed")


def wanted_active(job: Obj, succeeded: int) -> int:
    """How many Pods should run: parallelism, bounded by the completions left; a work-queue
    Job (no completions) starts none once one Pod succeeded."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is None:
        return 0 if succeeded > 0 else parallelism
    return max(0, min(parallelism, int(completions) - succeeded))


def success_reached(job: Obj, succeeded: int, active: int) -> bool:
    completions = (job.get("spec") or {}).get("completions")
    if completions is None:
        return succeeded > 0 and active == 0
    return succeeded >= int(completions)
