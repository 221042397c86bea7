"""`LocalProvider`: an instance is a set of process groups on this machine, one per container.

Built by `providers.registry` from settings; called by the vnode. Each instance lives in
`<state_dir>/local/<cluster>.<alias>/<claim>/` with its records, its volumes, and per container
a folder with its log and a supervisor that outlives the manager (`providers.local.sequence`
orders them); this object sees only its owner's folder (folders of another owner,
or of the layout before owners, directly under `local/`, are never read).

Rule for gone: `terminate` marks the folder and signals; once no process of the instance
lives, the folder is deleted (by `terminate`, `get` or `list`, whichever sees it first),
after which `get` returns None and `list` omits it. Rule for an interrupted launch: a
container folder whose supervisor was never started (the manager stopped between creating
it and launching) is launched by whoever sees it next (`provision`, `get` or `list`); the
supervisor's launch lock keeps that to one workload (I1). Rule for an exit: the folder
and its output stay, nothing running, until `terminate` deletes it; `restart` runs a
container again there (`providers.local.restart`).
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import builtins
import functools
import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from providers import base
from providers.egress import EgressMode
from providers.errors import NotFound, NotSupported, ProviderError, Unavailable
from providers.local import (
    attach,
    containers,
    folder,
    forward,
    launch,
    logs,
    pids,
    pod,
    process,
    restart,
    sequence,
    stamp,
    status,
    usage,
    volumes,
)
from providers.local.options import GPU_RESOURCE, LocalOptions, gpus_of, measure_capacity, parse_options
from providers.local.reader import FolderReader
from providers.owner import Owned, Owner
from providers.shape import PROBE_KINDS, VOLUME_KINDS, ContainerState, Shapes
from providers.usage import InstanceUsage, ResourceUsage, UsageSampler, instance_usage

REGION_TOKENS = frozenset({"local", "us", "eu", "ap", "any", "*"})  # all mean "this machine"
# Probes are run by the manager: exec through `exec`, TCP and HTTP against this host.
SHAPES = Shapes(
    several_containers=True,
    init_containers=True,
    sidecars=True,
    probes=frozenset(kind for kind in PROBE_KINDS if kind in ("exec", "tcpSocket", "httpGet")),
    volumes=frozenset(VOLUME_KINDS),
)
IMAGE_NOTICE = "the local provider runs the container's command on the manager's machine; image {image!r} is not pulled"


def image_notice(image: str) -> str:
    """An Event-ready message: the image is not used by this provider."""
    return IMAGE_NOTICE.format(image=image)


class LocalProvider(Owned):
    """Runs each container of a Pod as a supervised process group here."""

    def __init__(self, name: str, options: Mapping[str, Any], *, owner: Owner | None = None) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: LocalOptions = parse_options(options)
        self._root = self._options.state_dir / "local" / self._owner.key
        self._provision_lock = threading.Lock()
        self._launcher = launch.Launcher()
        self._capacity: dict[str, str] | None = None
        self._sampler = UsageSampler(self._options.usage_interval)

    @property
    def root(self) -> Path:
        """The folder holding one sub-folder per instance of this owner."""
        return self._root

    def capabilities(self) -> base.Capabilities:
        if self._capacity is None:
            self._capacity = measure_capacity(self._options.capacity, gpus=gpus_of(self._options))
        return base.Capabilities(
            poll_interval=self._options.poll_interval,
            tiers=(base.Tier.ON_DEMAND,),
            regions=(status.REGION,),
            capacity=dict(self._capacity),
            pulls_images=False,
            log_timestamps=True,
            restarts_in_place=True,
            bills_after_exit=False,
            keeps_output_after_terminate=False,
            shapes=SHAPES,
            billing_starts=base.BillingStart.CREATED,  # local processes: billed from creation at price 0
        )

    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest) -> base.ProvisionResult:
        if request.egress.mode is not EgressMode.OPEN:  # processes here reach whatever this host reaches
            mode = request.egress.mode.value
            raise NotSupported(f"spec.egress: {self._name} cannot enforce egress {mode}; only Open")
        launch.check_request(pod, request, gpus=self._gpus())
        instance_id = base.InstanceId(folder.instance_id_for(self._owner.key, request.claim))
        path = self._root / request.claim
        try:
            with self._provision_lock:
                created = launch.create_instance(self._root, pod, request, grace_period=self._options.grace_period)
                every = [entry.folder for entry in self._reader(path).containers()]
                start = [each for each in every if (created or self._needs_launch(each)) and self._launcher.begin(each)]
            self._launcher.launch(path, start, every=every)
        except OSError as exc:
            raise Unavailable(f"cannot start instance {instance_id}: {exc.strerror or type(exc).__name__}") from exc
        return base.ProvisionResult(instance_id=instance_id, reserved=True, credential=None, endpoint=status.ENDPOINT)

    def _gpus(self) -> int:
        """The GPUs a Pod may ask for here: what the node declares."""
        declared = self.capabilities().capacity.get(GPU_RESOURCE, "0")
        return int(declared) if declared.isdigit() else 0

    def _needs_launch(self, container: Path) -> bool:
        """A container folder whose launch was interrupted."""
        reader = FolderReader(container, owner_key=self._owner.key, instance=folder.instance_folder(container))
        observation = reader.observe()
        return observation is not None and status.needs_launch(observation)

    def terminate(self, instance_id: base.InstanceId) -> None:
        path = self._path(instance_id)
        if path is None or not path.exists():
            return
        instance = self._reader(path)
        try:
            if not (path / folder.TERMINATE_FILE).exists():
                folder.write_json_atomic(path / folder.TERMINATE_FILE, {"requested_at": stamp.now_stamp()})
            alive = False
            for entry in instance.containers():
                container = instance.container(entry)
                run = container.runs()
                # A container stopped first (the vnode's graceful stop) gets no second grace.
                stopped = container.run_record(folder.STOP_FILE, run) is not None
                self._signal_termination(container, run, grace=0.0 if stopped else self._options.grace_period)
                alive = alive or container.supervisor_alive(run) or container.workload_alive(run)
            if not alive:
                folder.remove_unsupervised(path)
        except FileNotFoundError:
            return  # removed under us: already gone
        except OSError as exc:
            raise Unavailable(f"cannot terminate {instance_id}: {exc.strerror or type(exc).__name__}") from exc

    def _signal_termination(self, container: FolderReader, run: int, *, grace: float) -> None:
        """The supervisor enforces the grace (`grace_period`, or none after a stop: its rule
        for a stop); without a supervisor, we do it ourselves."""
        supervisor = container.supervisor(run)
        if supervisor is not None and pids.is_alive(supervisor):
            try:
                os.kill(supervisor.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            return
        _term_then_kill(container, run, grace=grace)

    def get(self, instance_id: base.InstanceId) -> base.Instance | None:
        path = self._path(instance_id)
        if path is None:
            return None
        try:
            return self._instance(path)
        except OSError as exc:
            raise Unavailable(f"cannot read {instance_id}: {exc.strerror or type(exc).__name__}") from exc

    def list(self) -> list[base.Instance]:
        try:
            found = [self._instance(path) for path in self._folders()]
        except OSError as exc:
            raise Unavailable(f"cannot list local instances: {exc.strerror or type(exc).__name__}") from exc
        return [instance for instance in found if instance is not None]

    def offerings(self) -> builtins.list[base.Offering]:
        return [base.Offering(None, 0, base.Tier.ON_DEMAND, status.REGION, 0.0, True, "local")]

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        return [status.REGION] if any(token.lower() in REGION_TOKENS for token in declared) else []

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
    ) -> base.BlockScope:
        return base.default_block_scope(self._name, err, accelerator=accelerator, tier=tier, region=region)

    def logs(self, instance_id: base.InstanceId, options: base.LogOptions) -> base.LogStream:
        instance = self._reader(self._existing(instance_id))
        entry, container = containers.find(instance, options.container)
        named = containers.label(entry, instance_id)
        if options.previous:
            run_dir, missing = container.path / folder.PREVIOUS_DIR, "no previous run: it was never restarted"
        else:
            run_dir, missing = container.path, "no log"
            facts = containers.facts(instance, entry, container)
            if facts.state is ContainerState.WAITING and facts.runs == 0 and facts.message:
                raise NotFound(f"{named} has not started: {facts.message}")
        try:
            finished = _ended if options.previous else functools.partial(container.finished, container.runs())
            return logs.open_stream(run_dir, options, finished=finished)
        except FileNotFoundError as exc:
            raise NotFound(f"{named} has {missing}") from exc
        except OSError as exc:
            raise Unavailable(f"cannot read the log of {named}: {exc.strerror}") from exc

    def restart(self, instance_id: base.InstanceId, container: str = "") -> None:
        entry, found = containers.find(self._reader(self._existing(instance_id)), container)
        try:
            restart.run_again(found)
        except OSError as exc:
            named = containers.label(entry, instance_id)
            raise Unavailable(f"cannot restart {named}: {exc.strerror or type(exc).__name__}") from exc

    def stop_container(self, instance_id: base.InstanceId, container: str, *, grace: float) -> None:
        instance = self._reader(self._existing(instance_id))
        entry, found = containers.find(instance, container)
        try:
            if containers.facts(instance, entry, found).state is not ContainerState.RUNNING:
                return
            run = found.runs()
            sequence.request_stop(found.path, grace=grace)
            # KILL at once for grace 0 (the supervisor records 137); TERM then KILL where no supervisor would
            if grace <= 0 or not found.supervisor_alive(run):
                _term_then_kill(found, run, grace=grace)
        except OSError as exc:
            named = containers.label(entry, instance_id)
            raise Unavailable(f"cannot stop {named}: {exc.strerror or type(exc).__name__}") from exc

    def exec(
        self, instance_id: base.InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> base.Process:
        entry, found = containers.running(self._reader(self._existing(instance_id)), container)
        if not command:
            raise NotSupported("exec needs a command")
        spec, env = found.record(folder.SPEC_FILE) or {}, found.record(folder.ENV_FILE) or {}
        named = containers.label(entry, instance_id)
        mounts, root = [str(path) for path in spec.get("mounts") or ()], str(found.instance_path / folder.ROOT_DIR)
        command = [volumes.rewrite(part, mounts, root) for part in command]  # the container's paths
        try:
            cwd = str(spec.get("cwd") or found.instance_path)
            values = {**{str(k): str(v) for k, v in env.items()}, "PWD": cwd}  # `pwd` shows a mount path's link
            return process.start_process(command, cwd=cwd, env=values, tty=tty, stdin=stdin)
        except FileNotFoundError as exc:
            raise NotFound(f"command {command[0]!r} not found in {named}") from exc
        except OSError as exc:
            raise Unavailable(f"cannot start {command[0]!r} in {named}: {exc.strerror}") from exc

    def attach(self, instance_id: base.InstanceId, *, stdin: bool, tty: bool, container: str = "") -> base.Process:
        entry, found = containers.running(self._reader(self._existing(instance_id)), container)
        try:
            run = found.runs()
            exit_code, finished = functools.partial(found.exit_code, run), functools.partial(found.finished, run)
            return attach.Attachment(found.path, stdin=stdin, exit_code=exit_code, finished=finished)
        except OSError as exc:
            raise Unavailable(f"cannot attach to {containers.label(entry, instance_id)}: {exc.strerror}") from exc

    def usage(self, instance_id: base.InstanceId) -> InstanceUsage | None:
        """Each running container's process group, sampled from /proc (`providers.local.usage`)."""
        instance = self._reader(self._existing(instance_id))
        measured: dict[str, ResourceUsage] = {}
        try:
            for entry in instance.containers():
                leader = instance.container(entry).workload(instance.container(entry).runs())
                if leader is not None:
                    sample = self._sampler.sample(leader, functools.partial(usage.read_group, leader))
                    if sample is not None:
                        measured[entry.name] = sample
        except OSError as exc:
            raise Unavailable(f"cannot measure {instance_id}: {exc.strerror or type(exc).__name__}") from exc
        return instance_usage(measured)

    def port_forward(self, instance_id: base.InstanceId, port: int) -> base.PortConnection:
        """127.0.0.1:port: the instance's processes share this machine's loopback."""
        entry, _ = containers.running(self._reader(self._existing(instance_id)), "")
        return forward.connect_loopback(port, label=containers.label(entry, instance_id))

    def _reader(self, path: Path) -> FolderReader:
        return FolderReader(path, owner_key=self._owner.key)

    def _path(self, instance_id: str) -> Path | None:
        """This owner's folder for `instance_id`; None for an id of another owner (or none)."""
        parsed = folder.parse_instance_id(instance_id)
        if parsed is None or parsed[0] != self._owner.key:
            return None
        return self._root / parsed[1]

    def _existing(self, instance_id: base.InstanceId) -> Path:
        path = self._path(instance_id)
        if path is None or not path.is_dir():
            raise NotFound(f"no local instance {instance_id}")
        return path

    def _folders(self) -> Iterator[Path]:
        try:
            entries = sorted(self._root.iterdir())
        except FileNotFoundError:
            return
        for entry in entries:
            if folder.is_claim(entry.name) and entry.is_dir():
                yield entry

    def _instance(self, path: Path) -> base.Instance | None:
        seen = self._reader(path).observe_containers()
        if seen is None:
            return None
        instance = pod.instance_from(seen)
        if instance is None:
            folder.remove_unsupervised(path)  # kept while a late launcher still holds it
            return None
        for each in seen:
            if each.folder is not None and status.needs_launch(each.observation):
                self._launcher.resume(each.folder)
        return instance


def _term_then_kill(container: FolderReader, run: int, *, grace: float) -> None:
    """TERM the container's group now and KILL it after `grace` seconds (no supervisor does);
    KILL at once for `grace <= 0`."""
    leader = container.workload(run)
    if leader is not None and grace <= 0:
        pids.signal_group(leader, signal.SIGKILL)
    elif leader is not None and pids.signal_group(leader, signal.SIGTERM):
        timer = threading.Timer(grace, pids.signal_group, (leader, signal.SIGKILL))
        timer.daemon = True
        timer.start()


def _ended() -> bool:
    """The previous run's log is complete: a follow of it ends at its end."""
    return True


def _conforms(
    provider: LocalProvider,
) -> tuple[
    base.Provider,
    base.LogStreamer,
    base.Executor,
    base.Attacher,
    base.Restarter,
    base.ContainerStopper,
    base.UsageReporter,
    base.PortForwarder,
]:
    """mypy proves here, once, that LocalProvider satisfies the seam's protocols."""
    return provider, provider, provider, provider, provider, provider, provider, provider
