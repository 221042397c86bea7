"""The one Pod patch that places a Pod: its nodeSelector, the placement annotations, our
scheduling gate removed, and the finalizer `nebula.io/spend` added (placement.settle folds the
Pod's spend into its pool's ledger before removing it), as a JSON patch (RFC 6902) that applies
only to the Pod as placement read it.

Pure; the placement controller sends it. Never removes another controller's gate.
Tests: tests/placement/test_ungate_patch.py,
tests/placement/test_settle.py::test_the_ungate_patch_adds_the_spend_finalizer_once.
"""

from __future__ import annotations

from typing import Any

from kube import names
from placement.optimizer import Candidate

JsonDict = dict[str, Any]
JSON_PATCH = "application/json-patch+json"


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
