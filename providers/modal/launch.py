"""One `modal.Sandbox.create` on its own daemon thread, so `provision` need not wait for it,
and the arguments of that create for a Pod (pure).

Called by `ModalProvider.provision`. SDK 1.6.4's (V1) `Sandbox.create` sends SandboxCreate
and then waits until Modal schedules the sandbox (up to its `_SANDBOX_SCHEDULING_TIMEOUT`,
21 minutes); `provision` waits only `create_wait` for it and then reports the queued
sandbox it finds by the claim's tags. The thread keeps waiting on Modal's schedule; once
`provision` has returned (the create is abandoned), its outcome is only logged: a scheduled
sandbox at debug, an exception by its type only (never its text, which could quote a
request). No exception leaves the thread.
Tests: tests/providers/modal/test_modal_provider_queue.py, tests/providers/modal/test_modal_provider_provision.py,
tests/providers/modal/test_modal_provider_options.py::test_the_sandbox_timeout_is_a_backstop_past_the_deadline_and_the_pods_grace.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from providers import base
from providers.egress import EgressMode
from providers.errors import InvalidRequest, NotSupported
from providers.modal import catalog
from providers.modal.options import ModalOptions

logger = logging.getLogger(__name__)

MIB = 2**20


class BackgroundCreate:
    """`call` (the SDK's create) on a daemon thread; `wait` for it, `abandon` it."""

    def __init__(self, call: Callable[[], Any], claim: str) -> None:
        self._call = call
        self._claim = claim
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._abandoned = False
        self.sandbox: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"modal-create-{claim[:40]}")

    def start(self) -> BackgroundCreate:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """True once the create returned or raised (then `sandbox` or `error` says which)."""
        return self._done.wait(timeout)

    def abandon(self) -> bool:
        """Leave the create to its thread; False if it had already ended (read its outcome)."""
        with self._lock:
            if self._done.is_set():
                return False
            self._abandoned = True
            return True

    def _run(self) -> None:
        sandbox: Any = None
        error: BaseException | None = None
        try:
            sandbox = self._call()
        except BaseException as exc:  # handed to provision, or logged by type: never raised here
            error = exc
        with self._lock:
            self.sandbox, self.error = sandbox, error
            self._done.set()
            abandoned = self._abandoned
        if not abandoned:
            return
        if error is None:
            logger.debug(
                "modal scheduled the queued sandbox %s (claim %s)", getattr(sandbox, "object_id", "?"), self._claim
            )
        else:
            logger.info(
                "the create of the queued modal sandbox for claim %s ended with %s", self._claim, type(error).__name__
            )


DEFAULT_GRACE_SECONDS = 30  # a Pod's terminationGracePeriodSeconds when it sets none
BACKSTOP_SLACK_SECONDS = 60


def lifetime(pod: base.PodSpec, options: ModalOptions) -> int:
    """The sandbox's timeout, a backstop only (the vnode enforces activeDeadlineSeconds and
    stops the container with the Pod's grace): the deadline + the grace + 60 s of slack, at
    most `max_lifetime`; `max_lifetime` for a Pod without a deadline."""
    deadline = pod.active_deadline_seconds
    if not deadline:
        return options.max_lifetime
    grace = pod.termination_grace_seconds
    grace_seconds = DEFAULT_GRACE_SECONDS if grace is None else max(0, math.ceil(grace))
    return min(deadline + grace_seconds + BACKSTOP_SLACK_SECONDS, options.max_lifetime)


def create_arguments(
    pod: base.PodSpec,
    request: base.ProvisionRequest,
    *,
    options: ModalOptions,
    expand_regions: Callable[[Sequence[str]], list[str]],
) -> dict[str, Any]:
    """The keyword arguments of `Sandbox.create` for the Pod (but its image, secrets and tags):
    command, timeout, GPU, resources, region, egress. InvalidRequest or NotSupported for a Pod
    the provider cannot run."""
    if not pod.image:
        raise InvalidRequest("the Pod's first container has no image (spec.containers[0].image)")
    if len(pod.app_containers()) > 1 or pod.init_containers:
        raise NotSupported("the modal provider runs one container per Pod (no init or extra containers)")
    if (request.capacity_type or base.Tier.ON_DEMAND) is not base.Tier.ON_DEMAND:
        raise NotSupported("the modal provider sells OnDemand capacity only")
    try:
        gpu = catalog.gpu_string(pod.accelerator, pod.gpu_count)
    except ValueError as exc:
        raise InvalidRequest(f"metadata.labels[nebula.io/accelerator]: {exc}") from None
    arguments: dict[str, Any] = {
        "argv": [*pod.command, *pod.args],
        "timeout": lifetime(pod, options),
        "gpu": gpu,
        "workdir": pod.working_dir,
        "cpu": pod.cpu,
        "memory": -(-pod.memory // MIB) if pod.memory else None,
    }
    if request.region:
        regions = expand_regions([request.region]) if options.regions else [request.region]
        if not regions:
            raise InvalidRequest(f"the modal provider does not serve region {request.region!r}")
        arguments["region"] = regions[0]
    egress = request.egress
    if egress.mode is EgressMode.BLOCKED:
        arguments["block_network"] = True
    elif egress.mode is EgressMode.ALLOWLIST:
        arguments["outbound_cidr_allowlist"] = list(egress.cidrs)
        arguments["outbound_domain_allowlist"] = list(egress.domains)
    return arguments
