"""vnode.phases.teardown's one entry point, `Teardown.terminate(pod or Tombstone)`: a Tombstone
terminates only the tracked entry of its UID; a Pod is terminated whether tracked or not (an
untracked one's claim is looked up and its instance adopted first)."""

from __future__ import annotations

import uuid

from kube import billing as kbilling
from kube import names
from providers.base import InstanceId, InstanceState
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod, kept_fake_handler
from vnode.handler import Handler
from vnode.model import billing
from vnode.phases.teardown import Tombstone


def fake_handler() -> Handler:
    return kept_fake_handler("teardown")[0]


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


def test_a_span_the_poll_closed_meanwhile_is_written_before_the_pod_goes() -> None:
    """The race the RBAC proof caught under load (1 run in 30): while the teardown stopped the
    Pod, the poll thread saw the instance terminating and closed its billing span in memory; the
    teardown's own close then changed nothing, so it wrote nothing and forgot the entry, and the
    Pod went with its span open on it (placement settles such a Pod only after its grace and two
    minutes). Whatever of the record is unwritten is written before the Pod goes."""
    handler, kube, _ = kept_fake_handler("teardown")
    provider = handler.provider
    pod = adopt_new_pod(handler, "raced")
    entry = handler.tracked("default/raced")
    assert entry is not None and billing.current(entry).open is not None
    handler.writer.flush(entry, pod)  # the open span on the Pod, as once it runs
    kube.patches.clear()
    terminate = provider.terminate

    def terminate_as_the_poll_closes(instance_id: InstanceId) -> None:
        terminate(instance_id)
        with entry.lock:  # the poll thread's look at the terminating instance, at this moment
            billing.close(entry, None)

    provider.terminate = terminate_as_the_poll_closes  # type: ignore[method-assign]
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-12-05T12:00:00Z"}}
    wait_for(lambda: handler.teardown.terminate(deleting) is None, what="the stop, then terminate")
    assert handler.tracked("default/raced") is None
    written = [
        body["metadata"]["annotations"][names.BILLING_ANNOTATION]
        for _, body in kube.patches
        if names.BILLING_ANNOTATION in ((body.get("metadata") or {}).get("annotations") or {})
    ]
    assert written and kbilling.parse(written[-1]).open is None, kube.patches
