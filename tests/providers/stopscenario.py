"""The three graceful-stop scenarios every cloud's stop tests run (aws, modal, runpod): a
workload that traps SIGTERM and finishes its work, one that ignores it, and a force delete
after a graceful one. The provider-neutral form runs in tests/providers/test_contract.py;
these helpers serve the clouds whose stop needs their own rig (SSH, the fake's exec)."""

from __future__ import annotations

import time

from providers.base import Instance, InstanceId, InstanceState, Provider
from providers.streams import ContainerStopper
from tests.support.polling import wait_for

TRAPS = "trap 'sleep 2; echo checkpoint saved; exit 143' TERM; echo ready; while :; do sleep 0.1; done"
IGNORES = "trap '' TERM; echo ready; while :; do sleep 0.1; done"
ASK_BOUND = 8.0  # one command on the instance; far below the 10 s grace a stop must not wait out


def ask(stopper: ContainerStopper, instance_id: InstanceId, container: str, grace: float) -> float:
    """Stop `container`; the wall time it was asked at (a provider's finished_at is wall time).
    The call returns once asked, never after the grace."""
    asked = time.time()
    stopper.stop_container(instance_id, container, grace=grace)
    assert time.time() - asked < ASK_BOUND
    return asked


def ended(provider: Provider, instance_id: InstanceId, timeout: float) -> Instance:
    """The instance once `get` shows the workload's exit (FAILED: 143 and 137 are failures)."""

    def finished() -> Instance | None:
        found = provider.get(instance_id)
        return found if found is not None and found.state is InstanceState.FAILED else None

    return wait_for(finished, timeout, what=f"{instance_id}'s exit in get")
