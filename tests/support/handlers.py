"""Handlers with no API server: the one fake of the Kubernetes client (`NoApi`), a Handler
built on it, and Pods provisioned straight at a provider and adopted, as after a restart.

Used by the kubelet and console tests, which read a Handler's view and never its writes:
any call that would reach the API fails the test at once.
"""

from __future__ import annotations

import uuid
from typing import Any

from providers.base import Provider, ProvisionRequest
from providers.claim import claim_name
from providers.podspec import pod_spec_from_dict
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from vnode.handler import Handler


class NoApi:
    """Stands in for the Kubernetes client (and the Event recorder) where a test never reaches
    the API; any call fails."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Kubernetes API call {name}")


def offline_handler(provider: Provider, **options: Any) -> Handler:
    """A Handler over `provider` whose every API call fails the test."""
    return Handler(provider, kube=NoApi(), events=NoApi(), **options)  # type: ignore[arg-type]


def adopt_new_pod(handler: Handler, name: str, **annotations: str) -> dict[str, Any]:
    """Provision an instance for a new Pod straight at the provider and adopt it, as after a
    restart: the Handler tracks the Pod, no API call."""
    pod = make_pod(name, namespace="default", uid=str(uuid.uuid4()), annotations=annotations, command=("sleep", "300"))
    meta = pod["metadata"]
    request = ProvisionRequest(claim=claim_name(meta["namespace"], name, meta["uid"]))
    result = handler.provider.provision(pod_spec_from_dict(pod), request)
    instance = wait_for(lambda: handler.provider.get(result.instance_id), what=f"the instance of {name}")
    handler.adopt(pod, instance)
    return pod
