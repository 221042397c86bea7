"""`ModalProvider`: one Modal Sandbox per Pod, on the real `modal` SDK, with logs, exec and stop.

Built by `providers.registry` from settings (`providers.modal.ModalProvider`); called by
the vnode and the kubelet API. Sandboxes carry the owner's key and the claim as tags, so
`list` (one `SandboxList` walk) finds every instance of this owner across restarts and
never another owner's; provision lists by the claim first (idempotent). The SDK's create
waits until Modal schedules the sandbox, so it runs on a thread (`launch.launch.BackgroundCreate`):
provision returns it reserved if Modal scheduled it within `create_wait`, else unreserved
once the claim's queued sandbox is listed (the vnode's provisioningTimeout then applies).
Env values go in a `modal.Secret.from_dict` and are never logged; the connect token minted
at creation is returned once, as the Pod's connect credential.
Tests: tests/providers/modal/test_modal_provider_provision.py, tests/providers/modal/test_modal_provider_owner.py,
tests/providers/modal/test_modal_provider_queue.py, tests/providers/modal/test_modal_provider_stop.py.
"""

from __future__ import annotations

import builtins
import logging
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from providers import base, claimlocks
from providers.egress import EgressMode
from providers.errors import InvalidRequest, NotFound, NotSupported, ProviderError, Unavailable
from providers.modal import catalog, launch, status, stop
from providers.modal.classify import classify, sdk_errors, translate
from providers.modal.logs import ModalLogStream
from providers.modal.options import ModalOptions, parse_options
from providers.modal.process import ModalProcess
from providers.modal.sdk import Session
from providers.modal.usage import UsageCache
from providers.owner import Owned, Owner
from providers.pullauth import auth_for
from providers.shape import SINGLE_CONTAINER

logger = logging.getLogger(__name__)

ALL_REGIONS = frozenset({"*", "any", "all"})
_SANDBOX_ID = re.compile(r"^sb-[A-Za-z0-9_-]{1,128}$")
EXEC_MARKER = "NEBULA_EXEC_ID"  # in a TTY exec's environment, so a resize can find its terminal
# $1 the marker (NAME=value), $2 rows, $3 columns: set the size of the terminal on the stdin of
# the first process whose environment holds the marker. POSIX sh, tr, grep and stty.
RESIZE_SCRIPT = (
    'for d in /proc/[0-9]*; do tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1" || continue; '
    't=$(readlink "$d/fd/0") || continue; case "$t" in /dev/pts/*) stty rows "$2" cols "$3" < "$t"; exit $?;; esac; '
    "done; exit 1"
)
QUEUE_LIST_BOUND = 60.0  # seconds after create_wait to see a queued sandbox listed before Unavailable
LIST_POLL_SECONDS = 0.2


class ModalProvider(Owned):
    """Runs each Pod's one container as a Modal Sandbox. Options: see `options.ModalOptions`."""

    def __init__(self, name: str, options: Mapping[str, Any] | None = None, *, owner: Owner | None = None) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: ModalOptions = parse_options(options or {})
        self._session = Session(self._options)
        self._usage = UsageCache()
        self._claim_locks = claimlocks.ClaimLocks()

    def __repr__(self) -> str:
        return f"ModalProvider(name={self._name!r}, owner={self._owner.key!r}, app={self._options.app!r})"

    @property
    def options(self) -> ModalOptions:
        return self._options

    def capabilities(self) -> base.Capabilities:
        return base.Capabilities(
            poll_interval=self._options.poll_interval,
            tiers=(base.Tier.ON_DEMAND,),
            regions=self._options.regions,
            capacity=dict(base.UNBOUNDED_CAPACITY),
            pulls_images=True,
            uses_pull_secrets=True,
            log_timestamps=True,  # Modal stamps each log entry
            restarts_in_place=False,
            bills_after_exit=False,  # a sandbox stops billing when its command exits
            keeps_output_after_terminate=True,  # Modal's log store keeps a terminated sandbox's output
            shapes=SINGLE_CONTAINER,
            egress=frozenset(EgressMode),
            billing_starts=base.BillingStart.STARTED,  # Modal bills per second of container time
        )

    def _owner_tags(self) -> dict[str, str]:
        return {status.TAG_OWNER: self._owner.key}

    # -- provision ----------------------------------------------------------------------
    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest) -> base.ProvisionResult:
        """Adopt the claim's live sandbox if there is one, else create one; return once Modal
        scheduled it (reserved, with the connect token) or once it is seen queued (module doc)."""
        arguments = launch.create_arguments(pod, request, options=self._options, expand_regions=self.expand_regions)
        with self._claim_locks.held(request.claim):
            tags = {**self._owner_tags(), status.TAG_CLAIM: request.claim}
            found = self._live(tags)
            if found is not None:
                return base.ProvisionResult(found.id, reserved=found.state is base.InstanceState.RUNNING)
            app = self._session.app()
            client = self._session.client()

            def create() -> Any:
                import modal

                pull = auth_for(pod.image, request.registry_auth)
                registry = (
                    modal.Secret.from_dict({"REGISTRY_USERNAME": pull.username, "REGISTRY_PASSWORD": pull.password})
                    if pull is not None
                    else None
                )
                image = modal.Image.from_registry(pod.image, secret=registry)
                secrets = [modal.Secret.from_dict(dict(request.env))] if request.env else []
                return modal.Sandbox.create(
                    *arguments.pop("argv"),
                    app=app,
                    client=client,
                    image=image,
                    secrets=secrets,
                    tags={**tags, status.TAG_PROVIDER: self._name},
                    **arguments,
                )

            return self._await_create(launch.BackgroundCreate(create, request.claim).start(), tags, request.claim)

    def _live(self, tags: dict[str, str]) -> base.Instance | None:
        for info in self._session.list_sandboxes(tags):
            found = status.instance_from(info)
            if found.state in (base.InstanceState.PROVISIONING, base.InstanceState.RUNNING):
                return found
        return None

    def _await_create(self, create: launch.BackgroundCreate, tags: dict[str, str], claim: str) -> base.ProvisionResult:
        """The create's outcome if it ends within `create_wait`, else the queued sandbox once
        listed; Unavailable if it is not listed within `QUEUE_LIST_BOUND` more seconds."""
        wait = self._options.create_wait
        deadline = time.monotonic() + wait + QUEUE_LIST_BOUND
        ended = create.wait(wait)
        while not ended:
            try:
                queued = self._live(tags)
            except ProviderError:
                if create.abandon():
                    raise
                break
            if queued is not None:
                if create.abandon():
                    return self._queued(queued.id, claim)
                break
            if time.monotonic() >= deadline:
                if create.abandon():
                    raise Unavailable(f"modal: the sandbox for claim {claim} is neither scheduled nor listed yet")
                break
            ended = create.wait(LIST_POLL_SECONDS)
        if create.error is not None:
            raise translate(create.error, creating=True) from create.error
        sandbox = create.sandbox
        sandbox_id = base.InstanceId(str(sandbox.object_id))
        with sdk_errors():
            token = sandbox.create_connect_token()
        logger.info("created modal sandbox %s for claim %s", sandbox_id, claim)
        return base.ProvisionResult(sandbox_id, reserved=True, credential=_credential(token))

    def _queued(self, sandbox_id: base.InstanceId, claim: str) -> base.ProvisionResult:
        """A sandbox Modal still queues: not reserved; its connect token if Modal mints one now."""
        credential: base.ConnectCredential | None = None
        try:
            sandbox = self._session.sandbox(sandbox_id)
            with sdk_errors():
                credential = _credential(sandbox.create_connect_token())
        except ProviderError as exc:
            logger.info("no connect token for the queued modal sandbox %s (%s)", sandbox_id, type(exc).__name__)
        logger.info("created modal sandbox %s for claim %s; modal queues it", sandbox_id, claim)
        return base.ProvisionResult(sandbox_id, reserved=False, credential=credential)

    # -- observe and terminate --------------------------------------------------------------
    def list(self) -> builtins.list[base.Instance]:
        """This owner's sandboxes in the app, ended ones included (one SandboxList walk)."""
        return [status.instance_from(info) for info in self._session.list_sandboxes(self._owner_tags())]

    def get(self, instance_id: base.InstanceId) -> base.Instance | None:
        if not _SANDBOX_ID.match(instance_id):
            return None
        info = self._info(instance_id)
        return status.instance_from(info) if info is not None else None

    def _info(self, instance_id: base.InstanceId) -> Any | None:
        for info in self._session.list_sandboxes(self._owner_tags()):
            if info.id == instance_id:
                return info
        return None

    def terminate(self, instance_id: base.InstanceId) -> None:
        """Only this owner's sandbox, only if it has not ended; gone is success."""
        instance = self.get(instance_id)
        if instance is None or instance.state in (
            base.InstanceState.TERMINATED,
            base.InstanceState.SUCCEEDED,
            base.InstanceState.FAILED,
        ):
            return
        try:
            sandbox = self._session.sandbox(instance_id)
            with sdk_errors():
                sandbox.terminate()
        except NotFound:
            return
        logger.info("terminated modal sandbox %s (claim %s)", instance_id, instance.claim)

    # -- offerings and regions ----------------------------------------------------------------
    def offerings(self) -> builtins.list[base.Offering]:
        regions = self._options.regions or ("any",)
        result = [base.Offering(None, 0, base.Tier.ON_DEMAND, region, None, True, "cpu") for region in regions]
        for entry in catalog.load_catalog():
            for count in entry.counts():
                gpu = entry.modal_gpu if count == 1 else f"{entry.modal_gpu}:{count}"
                for region in regions:
                    result.append(
                        base.Offering(
                            entry.accelerator,
                            count,
                            base.Tier.ON_DEMAND,
                            region,
                            round(entry.hourly_price * count, 4),
                            True,
                            gpu,
                        )
                    )
        return result

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        """`*`/`any`/`all`: every configured region; a group (`us`) its regions; others as is if served."""
        served = self._options.regions or ("any",)
        result: builtins.list[str] = []
        for token in declared:
            word = token.strip().lower()
            if word in ALL_REGIONS:
                matches = builtins.list(served)
            else:
                matches = [r for r in served if r == word or r.startswith(f"{word}-")]
            result.extend(region for region in matches if region not in result)
        return result

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
    ) -> base.BlockScope:
        return classify(self._name, err, accelerator=accelerator, tier=tier, region=region)

    # -- logs and exec --------------------------------------------------------------------------
    def logs(self, instance_id: base.InstanceId, options: base.LogOptions) -> base.LogStream:
        if options.previous:
            raise NotSupported("a Modal Pod is never restarted in place: there is no previous run")
        info = self._owned(instance_id)
        instance = status.instance_from(info)
        sandbox = self._session.sandbox(instance_id)

        def fetch(since: datetime) -> builtins.list[Any]:
            with sdk_errors():
                return builtins.list(sandbox.logs.fetch(since=since))

        def ended() -> bool:
            current = self.get(instance_id)
            return current is None or current.state in (
                base.InstanceState.SUCCEEDED,
                base.InstanceState.FAILED,
                base.InstanceState.TERMINATED,
            )

        return ModalLogStream(
            fetch, ended, options, start=instance.created_at, poll_seconds=self._options.log_poll_interval
        )

    def exec(
        self, instance_id: base.InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> base.Process:
        if not command:
            raise InvalidRequest("exec needs a command")
        instance = status.instance_from(self._owned(instance_id))
        if instance.state is not base.InstanceState.RUNNING:
            raise NotFound(f"modal sandbox {instance_id} is not running ({instance.state.value})")
        sandbox = self._session.sandbox(instance_id)

        marker = f"{EXEC_MARKER}={secrets.token_hex(8)}"

        def start(rows: int, cols: int) -> Any:
            if not tty:
                return sandbox.exec(*command, text=False)
            # `_exec` takes the terminal's PTYInfo (the public `pty=True` reads this process's
            # own terminal size, which is not the kubectl user's).
            name, value = marker.split("=", 1)
            return sandbox._exec(*command, pty_info=terminal(rows, cols), env={name: value}, text=False)

        def resize(rows: int, cols: int) -> bool:
            """Modal has no window-size call: a helper exec sets the size of the terminal of
            the process carrying `marker` (the kernel then signals SIGWINCH to it)."""
            with sdk_errors():
                helper = sandbox.exec("sh", "-c", RESIZE_SCRIPT, "sh", marker, str(rows), str(cols), text=False)
                return int(helper.wait()) == 0

        return ModalProcess(start, tty=tty, resize=resize)

    def stop_container(self, instance_id: base.InstanceId, container: str, *, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace`, by a command run through the sandbox's exec
        (`providers.modal.stop`), whose own timer stays on Modal's side: returns once the exec
        started. The sandbox then ends with the kernel's exit (143, 137 or the workload's
        own code). One container per sandbox: `container` names it. Not running: success."""
        instance = status.instance_from(self._owned(instance_id))
        if instance.state is not base.InstanceState.RUNNING:
            return
        sandbox = self._session.sandbox(instance_id)
        from modal.stream_type import StreamType

        try:
            with sdk_errors():
                sandbox.exec(
                    *stop.stop_argv(grace=grace),
                    env={stop.STOP_MARKER: "1"},
                    stdout=StreamType.DEVNULL,
                    stderr=StreamType.DEVNULL,
                )
        except NotFound:
            return  # it ended meanwhile
        logger.info("asked modal sandbox %s to stop (grace %gs)", instance_id, grace)

    def usage(self, instance_id: base.InstanceId) -> base.InstanceUsage | None:
        """The sandbox's median CPU and memory over the last minutes (`providers.modal.usage`);
        None unless it runs."""
        instance = status.instance_from(self._owned(instance_id))
        if instance.state is not base.InstanceState.RUNNING:
            return None
        sandbox = self._session.sandbox(instance_id)

        def read(since: datetime) -> Any:
            with sdk_errors():
                return sandbox._experimental_stats(since=since)

        return self._usage.get(instance_id, read)

    def _owned(self, instance_id: base.InstanceId) -> Any:
        info = self._info(instance_id) if _SANDBOX_ID.match(instance_id) else None
        if info is None:
            raise NotFound(f"no modal sandbox {instance_id}")
        return info

    def close(self) -> None:
        """Release the SDK client (tests; the manager keeps one for its life)."""
        self._session.close()


def terminal(rows: int, cols: int) -> Any:
    """A shell PTY of `rows` x `cols`, as `modal shell` asks for one."""
    from modal_proto import api_pb2

    return api_pb2.PTYInfo(
        enabled=True,
        winsz_rows=rows,
        winsz_cols=cols,
        env_term="xterm",
        pty_type=api_pb2.PTYInfo.PTY_TYPE_SHELL,
        no_terminate_on_idle_stdin=True,
    )


def _credential(token: Any) -> base.ConnectCredential:
    return base.ConnectCredential({"url": str(token.url).encode(), "token": str(token.token).encode()})


def _conforms(
    provider: ModalProvider,
) -> tuple[base.Provider, base.LogStreamer, base.Executor, base.ContainerStopper, base.UsageReporter]:
    """mypy proves here, once, that ModalProvider satisfies the seam's protocols."""
    return provider, provider, provider, provider, provider
