"""vnode.phases.teardown's one entry point, `Teardown.terminate(pod or Tombstone)`: a Tombstone
terminates only the tracked entry of its UID; a Pod is terminated whether tracked or not (an
untracked one's claim is looked up and its instance adopted first)."""

from __future__ import annotations

import uuid

from providers.base import InstanceState
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import KeptEvents, KeptPatches, adopt_new_pod, offline_handler
from vnode.handler import Handler
from vnode.phases.teardown import Tombstone


def fake_handler() -> Handler:
    provider = FakeProvider("fake", {"cloud": f"teardown-{uuid.uuid4().hex}"})
    return offline_handler(provider, events=KeptEvents(), kube=KeptPatches())


def test_a_tombstone_terminates_only_the_entry_of_its_uid() -> None:
    handler = fake_handler()
    pod = adopt_new_pod(handler, "old")
    key, uid = "default/old", pod["metadata"]["uid"]
    assert handler.teardown.terminate(Tombstone(key, uid="another-pods-uid")) is None
    entry = handler.tracked(key)
    assert entry is not None and not entry.terminate_asked  # a successor's tombstone is not this entry's
    assert handler.teardown.terminate(Tombstone(key, uid=uid)) is None  # the fake stops at once
    assert handler.tracked(key) is None
    assert all(i.state is not InstanceState.RUNNING for i in handler.provider.list())


def test_an_untracked_pod_is_looked_up_adopted_and_terminated() -> None:
    handler = fake_handler()
    pod = adopt_new_pod(handler, "cold")
    entry = handler.tracked("default/cold")
    assert entry is not None
    handler.context.tracked.forget(entry)  # a cold map, as after a restart
    assert not handler.tracks("default", "cold")
    # Its container is stopped first (SIGTERM, the fake ends it at once), then the instance goes.
    wait_for(lambda: handler.teardown.terminate(pod) is None, what="the graceful stop, then terminate")
    assert not handler.tracks("default", "cold")
    assert [c.args.split()[-1] for c in handler.provider.cloud.call_log("terminate")][-1].startswith("id=")
    assert all(i.state is not InstanceState.RUNNING for i in handler.provider.list())


def test_an_untracked_pod_without_an_instance_has_nothing_to_terminate() -> None:
    handler = fake_handler()
    pod = make_pod("never", namespace="default", uid=str(uuid.uuid4()))
    assert handler.teardown.terminate(pod) is None
    assert not handler.tracks("default", "never")
