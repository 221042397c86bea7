"""batch/v1 Job as the API server serves it: discovery, defaults, the generated selector and
labels, 422s with the real field paths, immutability, and the `get jobs` Table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devcluster import DevCluster, jobkind, tables
from tests.support.clients.rawhttp import Raw

JOBS = "/apis/batch/v1/namespaces/default/jobs"
MERGE = {"Content-Type": "application/merge-patch+json"}


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": template, **spec}}


def test_discovery_serves_batch_v1_jobs(cluster: DevCluster, raw: Raw) -> None:
    code, resources = raw.json("GET", "/apis/batch/v1")
    assert code == 200
    (jobs,) = [r for r in resources["resources"] if r["name"] == "jobs"]
    assert (jobs["kind"], jobs["namespaced"], jobs["categories"]) == ("Job", True, ["all"])
    assert "jobs/status" in {r["name"] for r in resources["resources"]}


def test_defaults_selector_and_labels_as_the_api_server(cluster: DevCluster, raw: Raw) -> None:
    code, made = raw.json("POST", JOBS, manifest("pi"))
    assert code == 201, made
    uid, spec = made["metadata"]["uid"], made["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert (spec["completionMode"], spec["suspend"], spec["podReplacementPolicy"]) == (
        "NonIndexed",
        False,
        "TerminatingOrFailed",
    )
    assert "manualSelector" not in spec
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    expected = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid,
        "job-name": "pi",
    }
    assert spec["template"]["metadata"]["labels"] == expected
    assert made["metadata"]["labels"] == expected
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == 30
    # parallelism alone leaves completions unset: a work queue
    code, queue = raw.json("POST", JOBS, manifest("queue", parallelism=3))
    assert code == 201 and "completions" not in queue["spec"] and queue["spec"]["parallelism"] == 3
    code, policy = raw.json("POST", JOBS, manifest("pfp", podFailurePolicy={"rules": []}))
    assert code == 201 and policy["spec"]["podReplacementPolicy"] == "Failed"


def test_invalid_jobs_are_refused_with_the_field_path(cluster: DevCluster, raw: Raw) -> None:
    always = manifest("always")
    del always["spec"]["template"]["spec"]["restartPolicy"]
    code, status = raw.json("POST", JOBS, always)
    assert code == 422
    assert status["message"] == (
        'Job.batch "always" is invalid: spec.template.spec.restartPolicy: '
        'Unsupported value: "Always": supported values: "OnFailure", "Never"'
    )
    assert (status["reason"], status["details"]["kind"], status["details"]["group"]) == ("Invalid", "Job", "batch")
    noimage = manifest("noimage")
    del noimage["spec"]["template"]["spec"]["containers"][0]["image"]
    code, status = raw.json("POST", JOBS, noimage)
    assert code == 422 and "spec.template.spec.containers[0].image: Required value" in status["message"]
    code, status = raw.json("POST", JOBS, manifest("indexed", completionMode="Indexed", completions=2))
    assert code == 422 and 'spec.completionMode: Unsupported value: "Indexed"' in status["message"]
    code, status = raw.json("POST", JOBS, manifest("sel", selector={"matchLabels": {"a": "b"}}))
    assert code == 422 and "`selector` not auto-generated" in status["message"]
    code, status = raw.json("POST", JOBS, manifest("neg", backoffLimit=-1))
    assert code == 422 and "spec.backoffLimit: Invalid value: -1" in status["message"]
    on_failure = manifest("onfail", podFailurePolicy={"rules": []})
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    code, status = raw.json("POST", JOBS, on_failure)
    assert code == 422 and 'only "Never" is supported when podFailurePolicy is specified' in status["message"]
    bad_rule = manifest("rule", podFailurePolicy={"rules": [{"action": "Count"}]})
    code, status = raw.json("POST", JOBS, bad_rule)
    assert code == 422 and "specifying one of OnExitCodes and OnPodConditions is required" in status["message"]
    assert raw.json("GET", JOBS)[1]["items"] == []


def test_the_template_and_completions_are_immutable(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", JOBS, manifest("fixed", suspend=True))[0] == 201
    image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "alpine"}]}}}}
    code, status = raw.json("PATCH", f"{JOBS}/fixed", image, headers=MERGE)
    assert (
        code == 422
        and "spec.template: Invalid value" in status["message"]
        and "field is immutable" in status["message"]
    )
    code, status = raw.json("PATCH", f"{JOBS}/fixed", {"spec": {"completions": 4}}, headers=MERGE)
    assert code == 422 and "spec.completions" in status["message"]
    code, resumed = raw.json("PATCH", f"{JOBS}/fixed", {"spec": {"suspend": False, "parallelism": 2}}, headers=MERGE)
    assert code == 200 and resumed["spec"]["parallelism"] == 2 and resumed["metadata"]["generation"] == 2


def test_table_columns_and_cells() -> None:
    now = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)
    job: dict[str, Any] = {
        "metadata": {"name": "pi", "creationTimestamp": "2026-01-10T11:58:00Z"},
        "spec": {
            "completions": 3,
            "parallelism": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": {"spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]}},
        },
        "status": {
            "succeeded": 3,
            "startTime": "2026-01-10T11:58:00Z",
            "completionTime": "2026-01-10T11:58:45Z",
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ],
        },
    }
    table = tables.to_table("Job", [job], resource_version="1", now=now)
    names = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert names == [(n, p) for n, _, p in jobkind.COLUMNS]
    assert [n for n, p in names if p == 0] == ["Name", "Status", "Completions", "Duration", "Age"]
    assert table["rows"][0]["cells"] == [
        "pi", "Complete", "3/3", "45s", "2m", "a,b", "i1,i2", "batch.kubernetes.io/controller-uid=u1",
    ]  # fmt: skip
    running = {**job, "status": {"startTime": "2026-01-10T11:59:30Z", "succeeded": 1}}
    assert jobkind.table_row(running, now)[1:4] == ["Running", "1/3", "30s"]
    queue = {**job, "spec": {**job["spec"], "completions": None, "parallelism": 4}, "status": {}}
    assert jobkind.table_row(queue, now)[1:4] == ["Running", "0/1 of 4", ""]
    failing = {**job, "status": {"conditions": [{"type": "FailureTarget", "status": "True"}]}}
    assert jobkind.table_row(failing, now)[1] == "FailureTarget"
