"""`LocalProvider`: an instance is a process group on this machine.

Built by `providers.registry` from settings; called by the vnode. Each instance lives in
`<state_dir>/local/<cluster>.<alias>/<claim>/` with its records, log and a supervisor that
outlives the manager; this object sees only its owner's folder (folders of another owner,
or of the layout before owners, directly under `local/`, are never read).

Rule for gone: `terminate` marks the folder and signals; once no process of the instance
lives, the folder is deleted (by `terminate`, `get` or `list`, whichever sees it first),
after which `get` returns None and `list` omits it. Rule for an interrupted launch: a
folder whose supervisor was never started (the manager stopped between creating it and
launching) is launched by whoever sees it next (`provision`, `get` or `list`); the
supervisor's launch lock keeps that to one workload (I1). Rule for an exit: the folder
and its output stay, nothing running, until `terminate` deletes it; `restart` runs the
workload again there (`providers.local.restart`).
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

from providers.base import (
    Attacher,
    BlockScope,
    Capabilities,
    Executor,
    Instance,
    InstanceId,
    InstanceState,
    LogOptions,
    LogStream,
    LogStreamer,
    Offering,
    PodSpec,
    Process,
    Provider,
    ProvisionRequest,
    ProvisionResult,
    Restarter,
    Tier,
    default_block_scope,
)
from providers.errors import NotFound, NotSupported, ProviderError, Unavailable
from providers.local import attach, folder, launch, logs, proc, process, restart, runs, stamp, status
from providers.local.options import LocalOptions, measure_capacity, parse_options
from providers.local.reader import FolderReader
from providers.owner import Owner

REGION_TOKENS = frozenset({"local", "us", "eu", "ap", "any", "*"})  # all mean "this machine"
IMAGE_NOTICE = "the local provider runs the container's command on the manager's machine; image {image!r} is not pulled"


def image_notice(image: str) -> str:
    """An Event-ready message: the image is not used by this provider."""
    return IMAGE_NOTICE.format(image=image)


class LocalProvider:
    """Runs each Pod's first container command as a supervised process group here."""

    def __init__(self, name: str, options: Mapping[str, Any], *, owner: Owner | None = None) -> None:
        self._name = name
        self._owner = owner or Owner.standalone(name)
        self._options: LocalOptions = parse_options(options)
        self._root = self._options.state_dir / "local" / self._owner.key
        self._provision_lock = threading.Lock()
        self._launching: set[str] = set()  # claims whose supervisor this object is starting
        self._capacity: dict[str, str] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def owner(self) -> Owner:
        return self._owner

    @property
    def root(self) -> Path:
        """The folder holding one sub-folder per instance of this owner."""
        return self._root

    def capabilities(self) -> Capabilities:
        if self._capacity is None:
            self._capacity = measure_capacity(self._options.capacity)
        return Capabilities(
            poll_interval=self._options.poll_interval,
            tiers=(Tier.ON_DEMAND,),
            regions=(status.REGION,),
            capacity=dict(self._capacity),
            pulls_images=False,
            log_timestamps=True,
            restarts_in_place=True,
            bills_after_exit=False,
            keeps_output_after_terminate=False,
        )

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        launch.check_request(pod, request)
        instance_id = InstanceId(folder.instance_id_for(self._owner.key, request.claim))
        path = self._root / request.claim
        try:
            with self._provision_lock:
                created = launch.create_instance(self._root, pod, request, grace_period=self._options.grace_period)
                start = self._begin_launch(path) if created is not None else self._needs_launch(path)
            if start:
                self._launch(path)
        except OSError as exc:
            raise Unavailable(f"cannot start instance {instance_id}: {exc.strerror or type(exc).__name__}") from exc
        return ProvisionResult(instance_id=instance_id, reserved=True, credential=None, endpoint=status.ENDPOINT)

    def _begin_launch(self, path: Path) -> bool:
        """Mark the claim as being launched by this object; False if it already is. Call
        with the provision lock held."""
        if path.name in self._launching:
            return False
        self._launching.add(path.name)
        return True

    def _needs_launch(self, path: Path) -> bool:
        """An existing folder whose launch was interrupted, now marked as ours to launch.
        Call with the provision lock held."""
        observation = self._reader(path).observe()
        return observation is not None and status.needs_launch(observation) and self._begin_launch(path)

    def _launch(self, path: Path) -> None:
        """Start the supervisor; if it never recorded itself, drop the folder so a retry starts afresh."""
        try:
            launch.start_supervisor(path)
        except BaseException:
            if not (path / folder.LAUNCH_FILE).exists():
                folder.remove_unsupervised(path)
            raise
        finally:
            with self._provision_lock:
                self._launching.discard(path.name)

    def _resume_launch(self, path: Path) -> None:
        """Launch, in the background, an instance whose launch an earlier process began and
        never finished; a failure is recorded in the folder so the instance reports it."""
        with self._provision_lock:
            if not self._begin_launch(path):
                return

        def resume() -> None:
            try:
                launch.start_supervisor(path)
            except (ProviderError, OSError) as exc:
                message = str(exc) if isinstance(exc, ProviderError) else exc.strerror or type(exc).__name__
                try:
                    record = {"message": message, "run": runs.current(path)}
                    folder.write_json_atomic(path / folder.LAUNCH_ERROR_FILE, record)
                except OSError:
                    pass  # the folder went away: the instance is gone anyway
            finally:
                with self._provision_lock:
                    self._launching.discard(path.name)

        threading.Thread(target=resume, name=f"local-launch-{path.name}", daemon=True).start()

    def terminate(self, instance_id: InstanceId) -> None:
        path = self._path(instance_id)
        if path is None or not path.exists():
            return
        entry = self._reader(path)
        try:
            if not (path / folder.TERMINATE_FILE).exists():
                folder.write_json_atomic(path / folder.TERMINATE_FILE, {"requested_at": stamp.now_stamp()})
            run = entry.runs()
            self._signal_termination(entry, run)
            if not (entry.supervisor_alive(run) or entry.workload_alive(run)):
                folder.remove_unsupervised(path)
        except FileNotFoundError:
            return  # removed under us: already gone
        except OSError as exc:
            raise Unavailable(f"cannot terminate {instance_id}: {exc.strerror or type(exc).__name__}") from exc

    def _signal_termination(self, entry: FolderReader, run: int) -> None:
        """The supervisor enforces the grace period; without one, we do it ourselves."""
        supervisor = entry.supervisor(run)
        if supervisor is not None and proc.is_alive(supervisor):
            try:
                os.kill(supervisor.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            return
        leader = entry.workload(run)
        if leader is not None and proc.signal_group(leader, signal.SIGTERM):
            timer = threading.Timer(self._options.grace_period, proc.signal_group, (leader, signal.SIGKILL))
            timer.daemon = True
            timer.start()

    def get(self, instance_id: InstanceId) -> Instance | None:
        path = self._path(instance_id)
        if path is None:
            return None
        try:
            return self._instance(path)
        except OSError as exc:
            raise Unavailable(f"cannot read {instance_id}: {exc.strerror or type(exc).__name__}") from exc

    def list(self) -> list[Instance]:
        try:
            found = [self._instance(path) for path in self._folders()]
        except OSError as exc:
            raise Unavailable(f"cannot list local instances: {exc.strerror or type(exc).__name__}") from exc
        return [instance for instance in found if instance is not None]

    def offerings(self) -> builtins.list[Offering]:
        return [Offering(None, 0, Tier.ON_DEMAND, status.REGION, 0.0, True, "local")]

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        return [status.REGION] if any(token.lower() in REGION_TOKENS for token in declared) else []

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockScope:
        return default_block_scope(self._name, err, accelerator=accelerator, tier=tier, region=region)

    def logs(self, instance_id: InstanceId, options: LogOptions) -> LogStream:
        path = self._existing(instance_id)
        entry = self._reader(path)
        if options.previous:
            base, missing = path / folder.PREVIOUS_DIR, "no previous run: it was never restarted"
        else:
            base, missing = path, "no log"
        try:
            finished = _ended if options.previous else functools.partial(entry.finished, entry.runs())
            return logs.open_stream(base, options, finished=finished)
        except FileNotFoundError as exc:
            raise NotFound(f"instance {instance_id} has {missing}") from exc
        except OSError as exc:
            raise Unavailable(f"cannot read the log of {instance_id}: {exc.strerror}") from exc

    def restart(self, instance_id: InstanceId, container: str = "") -> None:
        path = self._existing(instance_id)
        try:
            restart.run_again(self._reader(path))
        except OSError as exc:
            raise Unavailable(f"cannot restart {instance_id}: {exc.strerror or type(exc).__name__}") from exc

    def _running(self, instance_id: InstanceId) -> Path:
        """The folder of a RUNNING instance; NotFound (with its state) otherwise."""
        path = self._existing(instance_id)
        instance = self.get(instance_id)
        if instance is None or instance.state is not InstanceState.RUNNING:
            state = instance.state.value if instance else "gone"
            raise NotFound(f"instance {instance_id} is not running ({state})")
        return path

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        path = self._running(instance_id)
        if not command:
            raise NotSupported("exec needs a command")
        entry = self._reader(path)
        spec, env = entry.record(folder.SPEC_FILE) or {}, entry.record(folder.ENV_FILE) or {}
        try:
            return process.start_process(
                command, cwd=str(spec.get("cwd") or path), env={str(k): str(v) for k, v in env.items()},
                tty=tty, stdin=stdin,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise NotFound(f"command {command[0]!r} not found in instance {instance_id}") from exc
        except OSError as exc:
            raise Unavailable(f"cannot start {command[0]!r} in {instance_id}: {exc.strerror}") from exc

    def attach(self, instance_id: InstanceId, *, stdin: bool, tty: bool, container: str = "") -> Process:
        entry = self._reader(self._running(instance_id))
        try:
            run = entry.runs()
            exit_code, finished = functools.partial(entry.exit_code, run), functools.partial(entry.finished, run)
            return attach.Attachment(entry.path, stdin=stdin, exit_code=exit_code, finished=finished)
        except OSError as exc:
            raise Unavailable(f"cannot attach to {instance_id}: {exc.strerror}") from exc

    def _reader(self, path: Path) -> FolderReader:
        return FolderReader(path, owner_key=self._owner.key)

    def _path(self, instance_id: str) -> Path | None:
        """This owner's folder for `instance_id`; None for an id of another owner (or none)."""
        parsed = folder.parse_instance_id(instance_id)
        if parsed is None or parsed[0] != self._owner.key:
            return None
        return self._root / parsed[1]

    def _existing(self, instance_id: InstanceId) -> Path:
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

    def _instance(self, path: Path) -> Instance | None:
        observation = self._reader(path).observe()
        if observation is None:
            return None
        instance = status.instance_from(observation)
        if instance is None:
            folder.remove_unsupervised(path)  # kept while a late launcher still holds it
        elif status.needs_launch(observation):
            self._resume_launch(path)
        return instance


def _ended() -> bool:
    """The previous run's log is complete: a follow of it ends at its end."""
    return True


def _conforms(provider: LocalProvider) -> tuple[Provider, LogStreamer, Executor, Attacher, Restarter]:
    """mypy proves here, once, that LocalProvider satisfies the seam's protocols."""
    return provider, provider, provider, provider, provider
