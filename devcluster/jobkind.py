"""batch/v1 Job: the real API server's defaulting, generated selector, validation, update
rules (spec.template and friends immutable) and its `kubectl get jobs` Table row.

Pure functions over plain dicts, called by `resources.py` (create and update) and `tables.py`.
It never touches the store and never runs Pods: the controller is `devcluster.jobs`.
Indexed Jobs are refused at create (spec.completionMode), see docs/devcluster.md "Jobs".
Tests: tests/devcluster/test_jobs_kind.py::test_defaults_selector_and_labels_as_the_api_server,
tests/devcluster/test_jobs_kind.py::test_table_columns_and_cells.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from devcluster import kinds
from devcluster.durations import age, human_duration
from devcluster.errors import ApiError, Cause, invalid

KIND, GROUP = "Job", "batch"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID, LEGACY_JOB_NAME = "controller-uid", "job-name"
DEFAULT_BACKOFF_LIMIT = 6
ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")
Obj = dict[str, Any]


def is_job(kind: str, group: str) -> bool:
    return kind == KIND and group == GROUP


_CAUSE_REASONS = {
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Duplicate value": "FieldValueDuplicate",
    "Forbidden": "FieldValueForbidden",
}


def job_invalid(name: str, detail: str) -> ApiError:
    """422 as the real server words it: `Job.batch "x" is invalid: <field>: <why>`, the field
    in `details.causes` (kubectl prints it)."""
    field, _, why = detail.partition(": ")
    reason = next((r for p, r in _CAUSE_REASONS.items() if why.startswith(p)), "FieldValueInvalid")
    return invalid(KIND, name, [Cause(field, reason, why)], group=GROUP)


def prepare_new(job: Obj) -> None:
    """Defaults (SetDefaults_Job), the generated selector and labels, then validation."""
    meta = job["metadata"]
    name = str(meta.get("name", ""))
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise job_invalid(name, "spec.template.spec.containers: Required value")
    job.pop("status", None)
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for pattern in (rule or {}).get("onPodConditions") or [] if isinstance(rule, dict) else []:
            if isinstance(pattern, dict):
                pattern.setdefault("status", "True")
    template = spec.setdefault("template", {})
    if not isinstance(template, dict):
        raise job_invalid(name, "spec.template: Invalid value: must be a PodTemplateSpec")
    template_meta = template.setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    if not spec.get("manualSelector"):
        if spec.get("selector"):
            raise job_invalid(
                name, f"spec.selector: Invalid value: {_selector_text(spec['selector'])}: `selector` not auto-generated"
            )
        uid = meta["uid"]
        spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
        labels.update({CONTROLLER_UID: uid, JOB_NAME: name, LEGACY_CONTROLLER_UID: uid, LEGACY_JOB_NAME: name})
    if labels and not meta.get("labels"):
        meta["labels"] = dict(labels)
    template_spec = template.setdefault("spec", {})
    if isinstance(template_spec, dict):
        kinds.default_pod({"metadata": {}, "spec": template_spec})
    validate(job)


def validate(job: Obj) -> None:
    name = str(job["metadata"].get("name", ""))
    spec = job["spec"]
    for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        value = spec.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise job_invalid(name, f"spec.{field}: Invalid value: {value!r}: must be an integer")
        if value < 0 or (field == "activeDeadlineSeconds" and value == 0):
            rule = (
                "must be greater than 0" if field == "activeDeadlineSeconds" else "must be greater than or equal to 0"
            )
            raise job_invalid(name, f"spec.{field}: Invalid value: {value}: {rule}")
    mode = spec.get("completionMode")
    if mode == "Indexed":
        raise job_invalid(
            name,
            'spec.completionMode: Unsupported value: "Indexed": supported values: "NonIndexed" '
            "(the dev cluster's Job controller runs NonIndexed Jobs only)",
        )
    if mode != "NonIndexed":
        raise job_invalid(
            name, f'spec.completionMode: Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"'
        )
    template = spec["template"]
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        raise job_invalid(
            name,
            f"spec.template.metadata.labels: Invalid value: {_selector_text({'matchLabels': labels})}: "
            "`selector` does not match template `labels`",
        )
    template_spec = template.get("spec") or {}
    restart = template_spec.get("restartPolicy")
    if restart not in ("OnFailure", "Never"):
        raise job_invalid(
            name,
            f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
        )
    try:
        kinds.validate_pod({"metadata": {"name": name}, "spec": template_spec})
    except ApiError as err:  # the template's field errors, each under spec.template
        causes = [Cause("spec.template." + c.field, c.reason, c.message) for c in err.causes]
        raise invalid(KIND, name, causes, group=GROUP) from None
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        if restart != "Never":
            raise job_invalid(
                name,
                f'spec.template.spec.restartPolicy: Invalid value: "{restart}": '
                'only "Never" is supported when podFailurePolicy is specified',
            )
        _validate_policy(name, policy)


def _validate_policy(name: str, policy: Any) -> None:
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        raise job_invalid(name, "spec.podFailurePolicy.rules: Required value")
    for i, rule in enumerate(rules):
        path = f"spec.podFailurePolicy.rules[{i}]"
        if not isinstance(rule, dict):
            raise job_invalid(name, f"{path}: Invalid value: must be an object")
        action = rule.get("action")
        if action == "FailIndex":
            raise job_invalid(name, f'{path}.action: Invalid value: "FailIndex": requires the Indexed completion mode')
        if action not in ACTIONS:
            supported = ", ".join(f'"{a}"' for a in ("Count", "FailJob", "Ignore"))
            raise job_invalid(name, f'{path}.action: Unsupported value: "{action}": supported values: {supported}')
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (conditions is None):
            raise job_invalid(
                name, f"{path}: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"
            )
        if codes is not None:
            operator, values = (codes or {}).get("operator"), (codes or {}).get("values") or []
            if operator not in ("In", "NotIn"):
                raise job_invalid(
                    name,
                    f'{path}.onExitCodes.operator: Unsupported value: "{operator}": supported values: "In", "NotIn"',
                )
            if not values or not all(isinstance(v, int) for v in values):
                raise job_invalid(name, f"{path}.onExitCodes.values: Required value")
            if operator == "In" and 0 in values:
                raise job_invalid(
                    name,
                    f"{path}.onExitCodes.values[{values.index(0)}]: Invalid value: 0: must not be 0 for the In operator",  # noqa: E501
                )
            if values != sorted(set(values)):
                raise job_invalid(
                    name, f"{path}.onExitCodes.values: Invalid value: {values}: must be ordered and unique"
                )
        for j, pattern in enumerate(conditions or []):
            if not isinstance(pattern, dict) or not pattern.get("type"):
                raise job_invalid(name, f"{path}.onPodConditions[{j}].type: Required value")


def prepare_update(old: Obj, new: Obj, *, subresource: str) -> None:
    """The immutable fields of a Job's spec; a status update leaves the spec as it was."""
    if subresource:
        return
    name = str(old["metadata"].get("name", ""))
    old_spec, new_spec = old.get("spec") or {}, new.get("spec")
    if not isinstance(new_spec, dict):
        raise job_invalid(name, "spec: Required value")
    for key in ("parallelism", "backoffLimit", "completionMode", "suspend", "podReplacementPolicy", "manualSelector"):
        if key not in new_spec and key in old_spec:
            new_spec[key] = copy.deepcopy(old_spec[key])
    for key in ("selector", "completionMode", "completions", "podFailurePolicy"):
        if new_spec.get(key) != old_spec.get(key):
            raise job_invalid(name, f"spec.{key}: Invalid value: {new_spec.get(key)!r}: field is immutable")
    template = new_spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        kinds.default_pod({"metadata": {}, "spec": template["spec"]})
    if template != old_spec.get("template"):
        raise job_invalid(name, "spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable")
    validate(new)


def _selector_text(selector: Any) -> str:
    labels = (selector or {}).get("matchLabels") or {} if isinstance(selector, dict) else {}
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"


def format_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: `k=v,k2 in (a,b)`, `<none>` for an empty one."""
    if not isinstance(selector, dict):
        return "<none>"
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), ",".join(sorted(expr.get("values") or []))
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": str(key)}.get(
                str(op), f"!{key}"
            )
        )
    return ",".join(parts) or "<none>"


def has_condition(job: Obj, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


COLUMNS = [
    ("Name", "string", 0), ("Status", "string", 0), ("Completions", "string", 0), ("Duration", "string", 0),
    ("Age", "string", 0), ("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1),
]  # fmt: skip


def table_row(job: Obj, now: datetime) -> list[Any]:
    """printJob of kube-apiserver (1.31+), Wide on."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    if status.get("startTime"):
        start = datetime.fromisoformat(str(status["startTime"]).replace("Z", "+00:00"))
        end = status.get("completionTime")
        duration = (
            human_duration((datetime.fromisoformat(str(end).replace("Z", "+00:00")) - start).total_seconds())
            if end
            else age(status["startTime"], now)
        )
    state = "Running"
    for condition, text in (("Complete", "Complete"), ("Failed", "Failed")):
        if has_condition(job, condition):
            state = text
            break
    else:
        if meta.get("deletionTimestamp"):
            state = "Terminating"
        else:
            for condition in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
                if has_condition(job, condition):
                    state = condition
                    break
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        meta.get("name", ""),
        state,
        completions,
        duration,
        age(meta.get("creationTimestamp"), now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        format_selector(spec.get("selector")),
    ]
