"""The Job controller in a running DevCluster: Pods are made to finish by writing their
status (as a kubelet would), and the Job's status, conditions, Events and Pods are read
back through the API, as a client sees them."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.polling import wait_for

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}
FINALIZER = "batch.kubernetes.io/job-tracking"


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": template, **spec}}


def job_of(raw: Raw, name: str) -> dict[str, Any]:
    code, job = raw.json("GET", f"{JOBS}/{name}")
    assert code == 200, job
    return job  # type: ignore[no-any-return]


def pods_of(raw: Raw, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = raw.json("GET", f"{PODS}?labelSelector=batch.kubernetes.io%2Fjob-name%3D{name}")[1][
        "items"
    ]
    return items


def running(raw: Raw, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods_of(raw, name)
        if p["status"].get("phase") not in ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp")
    ]


def finish(raw: Raw, pod: dict[str, Any], phase: str, code: int = 0, **status: Any) -> None:
    """What the kubelet writes when the container exits (read fresh, retried on a conflict:
    the scheduler may write the Pod in between, as on a real cluster)."""
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    path = f"{PODS}/{pod['metadata']['name']}"

    def write() -> bool:
        current = raw.json("GET", path)[1]
        container = {"name": "main", "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
        body = dict(current, status={**current["status"], "phase": phase, "containerStatuses": [container], **status})
        answer = raw.json("PUT", f"{path}/status", body)
        assert answer[0] in (200, 409), answer
        return answer[0] == 200

    wait_for(write, what=f"{pod['metadata']['name']} {phase}")


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def events_of(raw: Raw, name: str) -> list[tuple[str, str, str]]:
    items = raw.json("GET", "/api/v1/namespaces/default/events")[1]["items"]
    return [
        (e["type"], e["reason"], e["message"])
        for e in items
        if e["involvedObject"]["kind"] == "Job" and e["involvedObject"]["name"] == name
    ]


def test_a_job_of_three_completions_completes(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("three", completions=3, parallelism=2))[0] == 201
    first = wait_for(lambda: len(running(raw, "three")) == 2 and running(raw, "three"), what="two Pods")
    for pod in first:
        assert pod["metadata"]["finalizers"] == [FINALIZER]
        assert pod["metadata"]["name"].startswith("three-") and len(pod["metadata"]["name"]) == len("three-") + 5
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == ("Job", True, True)
    job = wait_for(lambda: job_of(raw, "three")["status"].get("active") == 2 and job_of(raw, "three"))
    assert job["status"]["startTime"] and job["status"]["ready"] == 0 and job["status"]["terminating"] == 0
    assert job["status"]["uncountedTerminatedPods"] == {}
    finish(raw, first[0], "Succeeded")
    finish(raw, first[1], "Succeeded")
    (last,) = wait_for(lambda: len(running(raw, "three")) == 1 and running(raw, "three"), what="the third Pod")
    status = wait_for(lambda: job_of(raw, "three")["status"].get("succeeded") == 2 and job_of(raw, "three")["status"])
    assert status["active"] == 1 and "Complete" not in str(status.get("conditions"))
    finish(raw, last, "Succeeded")
    done = wait_for(lambda: condition(job_of(raw, "three"), "Complete") and job_of(raw, "three"), what="Complete")
    status = done["status"]
    assert (status["succeeded"], status.get("active"), status.get("failed")) == (3, None, None)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("SuccessCriteriaMet", "True", "CompletionsReached", "Reached expected number of succeeded pods"),
        ("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods"),
    ]
    assert status["completionTime"] >= status["startTime"]
    pods = pods_of(raw, "three")
    assert len(pods) == 3 and all(not p["metadata"].get("finalizers") for p in pods)  # counted, released
    seen = wait_for(lambda: len(events_of(raw, "three")) == 4 and events_of(raw, "three"))
    created = sorted(f"Created pod: {p['metadata']['name']}" for p in pods)
    assert sorted(m for _, r, m in seen if r == "SuccessfulCreate") == created
    assert ("Normal", "Completed", "Job completed") in seen


def test_backoff_limit_fails_the_job_and_deletes_active_pods(cluster: DevCluster, raw: Raw) -> None:
    cluster.jobs.backoff_base = 3600.0  # the first failure holds the replacement back
    assert raw.json("POST", JOBS, manifest("flaky", backoffLimit=1, parallelism=2, completions=4))[0] == 201
    first, second = wait_for(lambda: len(running(raw, "flaky")) == 2 and running(raw, "flaky"))
    finish(raw, first, "Failed", 1)
    status = wait_for(lambda: job_of(raw, "flaky")["status"].get("failed") == 1 and job_of(raw, "flaky")["status"])
    assert status["active"] == 1 and not status.get("conditions")
    assert len(running(raw, "flaky")) == 1  # backing off: no replacement yet
    cluster.jobs.backoff_base = 0.01
    third = wait_for(lambda: [p for p in running(raw, "flaky") if p["metadata"]["uid"] != second["metadata"]["uid"]])
    finish(raw, third[0], "Failed", 1)
    failed = wait_for(lambda: condition(job_of(raw, "flaky"), "Failed") and job_of(raw, "flaky"), what="Failed")
    status = failed["status"]
    message = "Job has reached the specified backoff limit"
    assert [(c["type"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("FailureTarget", "BackoffLimitExceeded", message),
        ("Failed", "BackoffLimitExceeded", message),
    ]
    assert status["failed"] == 3 and "active" not in status and "completionTime" not in status  # the active one too
    assert status["terminating"] == 0
    wait_for(lambda: second["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods_of(raw, "flaky")})
    seen = wait_for(
        lambda: ("Warning", "BackoffLimitExceeded", message) in events_of(raw, "flaky") and events_of(raw, "flaky")
    )
    assert ("Normal", "SuccessfulDelete", f"Deleted pod: {second['metadata']['name']}") in seen


def test_active_deadline_fails_the_job_with_deadline_exceeded(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("slow", activeDeadlineSeconds=1))[0] == 201
    failed = wait_for(lambda: condition(job_of(raw, "slow"), "Failed") and job_of(raw, "slow"), what="Failed")
    target = condition(failed, "FailureTarget")
    assert target and (target["reason"], target["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert failed["status"]["failed"] == 1 and running(raw, "slow") == []
    wait_for(
        lambda: ("Warning", "DeadlineExceeded", "Job was active longer than specified deadline")
        in events_of(raw, "slow")
    )


def test_pod_failure_policy_ignores_disruption_and_fails_on_exit_code(cluster: DevCluster, raw: Raw) -> None:
    cluster.jobs.backoff_base = 0.01
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        ]
    }
    assert raw.json("POST", JOBS, manifest("pfp", backoffLimit=0, podFailurePolicy=policy))[0] == 201
    (first,) = wait_for(lambda: running(raw, "pfp"))
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    finish(raw, first, "Failed", 137, conditions=[disruption])
    (second,) = wait_for(lambda: [p for p in running(raw, "pfp") if p["metadata"]["uid"] != first["metadata"]["uid"]])
    job = job_of(raw, "pfp")
    assert not job["status"].get("failed") and not condition(job, "Failed")  # ignored: not counted
    wait_for(
        lambda: not next(p for p in pods_of(raw, "pfp") if p["metadata"]["name"] == first["metadata"]["name"])[
            "metadata"
        ].get("finalizers")
    )
    finish(raw, second, "Failed", 42)
    failed = wait_for(lambda: condition(job_of(raw, "pfp"), "Failed") and job_of(raw, "pfp"))
    name = second["metadata"]["name"]
    reason = (condition(failed, "Failed") or {}).get("reason"), (condition(failed, "Failed") or {}).get("message")
    assert reason == (
        "PodFailurePolicy",
        f"Container main for pod default/{name} failed with exit code 42 matching FailJob rule at index 1",
    )
    assert failed["status"]["failed"] == 1


def test_suspend_deletes_pods_and_resume_starts_again(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("paused", parallelism=2, completions=2))[0] == 201
    wait_for(lambda: len(running(raw, "paused")) == 2)
    raw.json("PATCH", f"{JOBS}/paused", {"spec": {"suspend": True}}, headers=MERGE)
    job = wait_for(lambda: pods_of(raw, "paused") == [] and job_of(raw, "paused"), what="Pods deleted")
    suspended = wait_for(lambda: condition(job_of(raw, "paused"), "Suspended"))
    assert (suspended["status"], suspended["reason"], suspended["message"]) == ("True", "JobSuspended", "Job suspended")
    job = job_of(raw, "paused")
    assert "startTime" not in job["status"] and not job["status"].get("failed")  # suspension is no failure
    raw.json("PATCH", f"{JOBS}/paused", {"spec": {"suspend": False}}, headers=MERGE)
    wait_for(lambda: len(running(raw, "paused")) == 2)
    resumed = wait_for(
        lambda: (condition(job_of(raw, "paused"), "Suspended") or {}).get("status") == "False" and job_of(raw, "paused")
    )
    assert (condition(resumed, "Suspended") or {})["reason"] == "JobResumed" and resumed["status"]["startTime"]
    reasons = [r for _, r, _ in wait_for(lambda: len(events_of(raw, "paused")) >= 6 and events_of(raw, "paused"))]
    assert reasons.count("SuccessfulCreate") == 4 and {"Suspended", "Resumed", "SuccessfulDelete"} <= set(reasons)


def test_ttl_after_finished_deletes_the_job_and_its_pods(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("brief", ttlSecondsAfterFinished=1))[0] == 201
    (pod,) = wait_for(lambda: running(raw, "brief"))
    finish(raw, pod, "Succeeded")
    wait_for(lambda: raw.json("GET", f"{JOBS}/brief")[0] == 404, what="the Job deleted after its TTL")
    assert ("Normal", "Completed", "Job completed") in events_of(raw, "brief")  # finished first
    wait_for(lambda: pods_of(raw, "brief") == [], what="its Pods collected")


def test_a_pod_deleted_by_hand_counts_as_failed_and_is_replaced(cluster: DevCluster, raw: Raw) -> None:
    cluster.jobs.backoff_base = 0.01
    assert raw.json("POST", JOBS, manifest("victim"))[0] == 201
    (pod,) = wait_for(lambda: running(raw, "victim"))
    assert raw.json("DELETE", f"{PODS}/{pod['metadata']['name']}")[0] == 200
    (replacement,) = wait_for(lambda: running(raw, "victim"))
    assert replacement["metadata"]["uid"] != pod["metadata"]["uid"]
    wait_for(lambda: job_of(raw, "victim")["status"].get("failed") == 1)
    wait_for(lambda: pod["metadata"]["name"] not in {p["metadata"]["name"] for p in pods_of(raw, "victim")})


def test_deleting_a_running_job_releases_and_collects_its_pods(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("gone", parallelism=2, completions=2))[0] == 201
    wait_for(lambda: len(running(raw, "gone")) == 2)
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    assert raw.json("DELETE", f"{JOBS}/gone", options)[0] == 200
    wait_for(lambda: pods_of(raw, "gone") == [], what="the tracking finalizers removed and the Pods collected")
