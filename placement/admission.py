"""The Pod mutating admission decision: AdmissionReview v1 in, AdmissionReview v1 out.

Pure; the console's `/webhooks/pods` view (nebula_site.webhooks) hands it the request body
and sends back what it returns. Only opted-in, unbound Pods are touched: they get the
`nebula.io/placement` scheduling gate, a key-only toleration of the virtual node taint, and
tolerations of the taints a node gets while NotReady or unreachable that last
`outage_seconds` (None: for as long as it lasts). A provider's API being down marks its
node NotReady, and the cluster's default (300 s, added by the API server before webhooks
run) would then evict, and so terminate, instances that were running fine all along.
A malformed review gets a clean denial with a message, never an exception. Tested in
tests/placement/test_admission_review.py::test_an_opted_in_pod_gets_the_gate_a_key_only_toleration_and_outlasts_outages.

The shape check (`providers.shapecheck`, design I9): given the Pod's candidate providers
(its NodePool's, or the one whose node it is bound to) with their `Shapes`, a Pod none of
them can serve is denied naming each field; one that only some cannot serve is admitted
with a `warnings` entry per provider that will not take it.
Tested in tests/placement/test_admission_shapes.py. A `nebula.io/max-hourly-price` that is not a
price is admitted with a warning (placement holds the Pod with InvalidRequest), as in
tests/placement/test_price_ceiling_admission.py::test_a_bad_ceiling_is_admitted_with_a_warning.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube import names
from placement.request import RequestError, labels, max_hourly_price
from providers import shapecheck
from providers.shape import Shapes

API_VERSION = "admission.k8s.io/v1"
MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit (I7)
MAX_DEPTH = 100  # I7: a Pod nests about 12 levels; deeper is hostile
# The node lifecycle controller's NoExecute taints for a NotReady and an unreachable node.
OUTAGE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class Candidates:
    """The providers that may run a Pod, with the shapes each serves; `where` names them for
    a person (`NodePool 'train'`, `node nebula-local`)."""

    where: str
    shapes: Mapping[str, Shapes]


CandidatesOf = Callable[[Mapping[str, Any]], Candidates | None]  # None: nothing to check against


@dataclass(frozen=True)
class Verdict:
    denial: str = ""  # non-empty: the Pod is refused with this message
    warnings: tuple[str, ...] = ()


def shape_verdict(pod: Mapping[str, Any], candidates: Candidates) -> Verdict:
    """Deny a Pod no candidate can serve; warn of each candidate that cannot, and of needs
    that are said but never refused (the service-account token)."""
    found = shapecheck.needs(pod)
    warnings = [f"{need.field}: {need.feature}" for need in found if need.warn_only]
    refusing = {
        name: refused
        for name, shapes in sorted(candidates.shapes.items())
        if (refused := shapecheck.refusals(shapecheck.not_served(found, shapes)))
    }
    if candidates.shapes and len(refusing) == len(candidates.shapes):
        listed = "; ".join(f"{name} cannot serve {shapecheck.describe(needs)}" for name, needs in refusing.items())
        return Verdict(denial=f"no provider of {candidates.where} can serve this Pod: {listed}")
    warnings += [
        f"provider {name!r} cannot serve {shapecheck.describe(needs)}; placement will not choose it"
        for name, needs in refusing.items()
    ]
    return Verdict(warnings=tuple(warnings))


def ceiling_warnings(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """A warning for an opted-in Pod whose price ceiling is not a price (placement will hold it)."""
    if labels(pod).get(names.ENABLED_LABEL) != "true":
        return ()
    try:
        max_hourly_price(pod)
    except RequestError as exc:
        return (f"{exc}; placement holds the Pod (InvalidRequest) until it is fixed",)
    return ()


def review(
    body: bytes, *, outage_seconds: int | None = None, candidates_of: CandidatesOf | None = None
) -> tuple[int, JsonDict]:
    """The HTTP status and JSON answer for one AdmissionReview request body.

    400 with a Status when the body is not an AdmissionReview at all (no uid to answer to);
    200 with `allowed: false` and a 400 result when it has a uid but a broken Pod."""
    if len(body) > MAX_BODY:
        return 413, status_body(413, f"request body over {MAX_BODY} bytes")
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return 400, status_body(400, "the body is not JSON; expected an admission.k8s.io/v1 AdmissionReview")
    except RecursionError:  # I7: nested deeper than the parser's stack
        return 400, status_body(400, f"the body nests JSON deeper than {MAX_DEPTH} levels")
    if _depth_over(document, MAX_DEPTH):
        return 400, status_body(400, f"the body nests JSON deeper than {MAX_DEPTH} levels")
    if not isinstance(document, Mapping) or document.get("kind") != "AdmissionReview":
        return 400, status_body(400, "expected kind AdmissionReview")
    if document.get("apiVersion") != API_VERSION:
        return 400, status_body(400, f"expected apiVersion {API_VERSION}, got {document.get('apiVersion')!r}")
    request = document.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str) or not request["uid"]:
        return 400, status_body(400, "request.uid is required")
    uid = request["uid"]
    if request.get("operation", "CREATE") != "CREATE" or not _is_pod(request):
        return 200, _answer(uid, allowed=True)
    pod = request.get("object")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
        return 200, _answer(uid, allowed=False, code=400, message="request.object must be a Pod with a spec")
    try:
        patch = pod_patch(pod, outage_seconds=outage_seconds)
        candidates = candidates_of(pod) if candidates_of is not None else None
        verdict = shape_verdict(pod, candidates) if candidates is not None else Verdict()
        verdict = Verdict(verdict.denial, verdict.warnings + ceiling_warnings(pod))
    except (TypeError, AttributeError, ValueError) as exc:
        return 200, _answer(uid, allowed=False, code=400, message=f"malformed Pod: {type(exc).__name__}")
    if verdict.denial:
        return 200, _answer(uid, allowed=False, code=400, message=verdict.denial, warnings=verdict.warnings)
    return 200, _answer(uid, allowed=True, patch=patch, warnings=verdict.warnings)


def pod_patch(pod: Mapping[str, Any], *, outage_seconds: int | None = None) -> list[JsonDict]:
    """The JSONPatch that gates an opted-in, unbound Pod; empty for every other Pod.
    Idempotent: a Pod that already has the gate and the tolerations gets an empty patch."""
    spec = pod["spec"]
    if labels(pod).get(names.ENABLED_LABEL) != "true" or spec.get("nodeName"):
        return []
    ops: list[JsonDict] = []
    gates = spec.get("schedulingGates")
    gate = {"name": names.PLACEMENT_GATE}
    if not isinstance(gates, list) or not gates:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [gate]})
    elif not any(isinstance(g, Mapping) and g.get("name") == names.PLACEMENT_GATE for g in gates):
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": gate})
    tolerations = spec.get("tolerations")
    toleration = {"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}
    if not isinstance(tolerations, list) or not tolerations:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": [toleration]})
    elif not any(_tolerates(t) for t in tolerations):
        ops.append({"op": "add", "path": "/spec/tolerations/-", "value": toleration})
    existing = tolerations if isinstance(tolerations, list) else []
    for key in OUTAGE_TAINTS:
        ops += _outage_toleration(existing, key, outage_seconds)
    return ops


def _outage_toleration(tolerations: list[Any], key: str, seconds: int | None) -> list[JsonDict]:
    """Make every toleration of `key`'s NoExecute taint last `seconds` (None: forever), or
    add one. The taint manager goes by the shortest matching toleration, so each one is set."""
    ops: list[JsonDict] = []
    found = False
    for index, toleration in enumerate(tolerations):
        if not isinstance(toleration, Mapping) or toleration.get("key") != key:
            continue
        if toleration.get("effect") not in (None, "", "NoExecute"):
            continue
        found = True
        path = f"/spec/tolerations/{index}/tolerationSeconds"
        if seconds is None and "tolerationSeconds" in toleration:
            ops.append({"op": "remove", "path": path})
        elif seconds is not None and toleration.get("tolerationSeconds") != seconds:
            ops.append({"op": "add", "path": path, "value": seconds})  # `add` replaces a member
    if found:
        return ops
    added: JsonDict = {"key": key, "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        added["tolerationSeconds"] = seconds
    return [{"op": "add", "path": "/spec/tolerations/-", "value": added}]


def _tolerates(toleration: Any) -> bool:
    """An `Exists` toleration of our key (or of every key) with effect empty or NoSchedule."""
    if not isinstance(toleration, Mapping) or toleration.get("operator") != "Exists":
        return False
    return toleration.get("key") in (names.PROVIDER_KEY, None, "") and toleration.get("effect") in (
        None,
        "",
        "NoSchedule",
    )


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind") or {}
    return isinstance(kind, Mapping) and kind.get("kind") == "Pod" and kind.get("group", "") == ""


def _answer(
    uid: str,
    *,
    allowed: bool,
    patch: list[JsonDict] | None = None,
    code: int = 200,
    message: str = "",
    warnings: tuple[str, ...] = (),
) -> JsonDict:
    response: JsonDict = {"uid": uid, "allowed": allowed}
    if warnings:
        response["warnings"] = list(warnings)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if not allowed:
        response["status"] = {"code": code, "message": message, "reason": "BadRequest" if code == 400 else ""}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def status_body(code: int, message: str) -> JsonDict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message}


def _depth_over(document: object, limit: int) -> bool:
    """Whether `document` nests lists and objects more than `limit` deep (no recursion)."""
    level: list[object] = [document]
    for _ in range(limit):
        level = [child for node in level for child in _children(node)]
        if not level:
            return False
    return True


def _children(node: object) -> list[object]:
    if isinstance(node, dict):
        return [v for v in node.values() if isinstance(v, dict | list)]
    if isinstance(node, list):
        return [v for v in node if isinstance(v, dict | list)]
    return []
