"""vnode.phases.provision reads a Pod once, at the door (`IncomingPod`): the typed PodSpec, the claim,
tier, region and pool, and what the sources read; a Pod whose PodSpec cannot be read is still
refused where it always was, after the shape check and its sources."""

from __future__ import annotations

import uuid

import pytest

from kube import names
from kube.worker import Retry
from providers.base import Tier
from providers.claim import claim_name
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.rigs.offline import KeptEvents, offline_handler
from vnode.phases.provision import IncomingPod

BAD_GPUS = {"resources": {"limits": {"nvidia.com/gpu": "1.5"}}}


def test_the_pod_is_read_once_at_the_door() -> None:
    uid = str(uuid.uuid4())
    pod = make_pod(
        "door",
        namespace="ml",
        uid=uid,
        labels={names.POOL_LABEL: "gpus"},
        annotations={names.REGION_ANNOTATION: "eu-west-1", "nebula.io/capacity-type": "spot"},
        container={"image": "trainer:1"},
        imagePullSecrets=[{"name": "ghcr"}, {}],
    )
    incoming = IncomingPod.of(pod)
    assert incoming.key == "ml/door" and incoming.claim == claim_name("ml", "door", uid)
    assert incoming.spec is not None and incoming.spec.image == "trainer:1" and incoming.invalid == ""
    assert (incoming.tier, incoming.region, incoming.pool) == (Tier.SPOT, "eu-west-1", "gpus")
    assert incoming.fields.pull_secrets == ("ghcr", "") and incoming.fields.source_namespace == "ml"
    unread = IncomingPod.of(make_pod("bad", container=BAD_GPUS))
    assert unread.spec is None and "nvidia.com/gpu" in unread.invalid
    assert unread.fields.source_namespace == "default"


def test_an_unreadable_pod_spec_is_refused_after_its_sources_as_before() -> None:
    events = KeptEvents()
    handler = offline_handler(FakeProvider("fake", {"cloud": f"door-{uuid.uuid4().hex}"}), events=events)
    secret_env = [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]
    waiting = make_pod("waits", namespace="default", uid=str(uuid.uuid4()), container={**BAD_GPUS, "env": secret_env})
    with pytest.raises(Retry):  # its env cannot be read yet (no API here): retried, not refused
        handler.provisioner.create_pod(waiting)
    assert not handler.tracks("default", "waits")
    refused = make_pod("refused", namespace="default", uid=str(uuid.uuid4()), container=BAD_GPUS)
    handler.provisioner.create_pod(refused)
    entry = handler.tracked("default/refused")
    assert entry is not None and entry.terminal
    assert (entry.desired_status or {}).get("reason") == names.REASON_CONFIG_ERROR
    told = [(reason, message) for name, _, reason, message in events.told if name == "refused"]
    assert [reason for reason, _ in told] == [names.EVENT_PROVISIONING, names.REASON_CONFIG_ERROR]
    assert "nvidia.com/gpu" in told[1][1]
