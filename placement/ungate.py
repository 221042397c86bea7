"""The one Pod patch that places a Pod: its nodeSelector, the placement annotations, our
scheduling gate removed, and the finalizer `nebula.io/spend` added (placement.settle folds the
Pod's spend into its pool's ledger before removing it), as a JSON patch (RFC 6902) that applies
only to the Pod as placement read it.

The patch is built by pure functions (`ungate_patch`, `placement_annotations`, `with_history`);
`send` does the I/O: one PATCH, with which the placement controller and `placement.capacitywait`
apply theirs. Never removes another controller's gate.
Tests: tests/placement/test_ungate_patch.py,
tests/placement/test_settle.py::test_the_ungate_patch_adds_the_spend_finalizer_once.
"""

from __future__ import annotations

from typing import Any

from kube import names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.worker import Requeue, Retry
from placement import interruptions
from placement.attempt import SETTLED, Attempt
from placement.optimizer import Candidate

JsonDict = dict[str, Any]
JSON_PATCH = "application/json-patch+json"
LOOK_AGAIN_NOW = Requeue(0.0)  # the Pod changed under our patch: the next look is a fresh attempt
PATCH_RETRY_DELAY = 1.0  # seconds before retrying a Pod patch the API server failed


def placement_annotations(chosen: Candidate, pool_name: str) -> dict[str, str]:
    """What the Pod is told of its placement: tier, region, pool, and the hourly price if known."""
    annotations = {
        names.CAPACITY_TYPE_ANNOTATION: chosen.tier.value,
        names.REGION_ANNOTATION: chosen.region,
        names.POOL_ANNOTATION: pool_name,
    }
    if chosen.hourly_price is not None:
        annotations[names.HOURLY_PRICE_ANNOTATION] = f"{chosen.hourly_price:.4f}".rstrip("0").rstrip(".")
    return annotations


def with_history(annotations: dict[str, str], history: list[float]) -> dict[str, str]:
    """`annotations` plus the workload's recent interruptions (`nebula.io/interruptions`), when
    it has any, so its next Pod and a restarted placement know them."""
    if not history:
        return annotations
    return {**annotations, names.INTERRUPTIONS_ANNOTATION: interruptions.format_history(history)}


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def ungate_patch(pod: JsonDict, provider: str, annotations: dict[str, str]) -> list[JsonDict]:
    """Pure: the JSON patch (RFC 6902) that places `pod`; fails as a whole if the Pod's uid
    or our gate's position changed since it was read."""
    meta, spec = pod["metadata"], pod["spec"]
    gates = spec.get("schedulingGates") or []
    index = next(i for i, g in enumerate(gates) if g.get("name") == names.PLACEMENT_GATE)
    ops: list[JsonDict] = [
        {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": names.PLACEMENT_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    if spec.get("nodeSelector"):
        ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(names.PROVIDER_KEY)}", "value": provider})
    else:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {names.PROVIDER_KEY: provider}})
    if meta.get("annotations"):
        for key, value in annotations.items():
            ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    finalizers = meta.get("finalizers") or []
    if not finalizers:
        ops.append({"op": "add", "path": "/metadata/finalizers", "value": [names.SPEND_FINALIZER]})
    elif names.SPEND_FINALIZER not in finalizers:
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": names.SPEND_FINALIZER})
    return ops


def send(kube: Kube, pod: JsonDict, ops: list[JsonDict], *, subresource: str = "") -> Attempt | None:
    """Apply `ops` to the Pod (or its `subresource`): None once applied; SETTLED when the Pod is
    gone; a fresh look now when it moved under the patch (409, or a failed `test` op: 422);
    Retry after PATCH_RETRY_DELAY for any other failure."""
    meta = pod["metadata"]
    path = path_for("pods", namespace=meta["namespace"], name=meta["name"]) + (f"/{subresource}" if subresource else "")
    try:
        kube.request("PATCH", path, body=ops, content_type=JSON_PATCH)
    except ConflictError:
        return Attempt(LOOK_AGAIN_NOW, settled=False)
    except NotFoundError:
        return SETTLED
    except KubeError as exc:
        if exc.status == 422:
            return Attempt(LOOK_AGAIN_NOW, settled=False)
        what = "placing" if not subresource else f"writing the {subresource} of"
        raise Retry(f"{what} {meta['namespace']}/{meta['name']} failed: {exc}", delay=PATCH_RETRY_DELAY) from exc
    return None
