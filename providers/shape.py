"""The Pod's shape as it crosses the seam: containers, their mounts, volume contents, the
facts of each container, and the `Shapes` a provider declares it can serve.

Built by `providers.podspec` (the containers) and `vnode.sources.volumes` (the volume contents);
read by providers; `providers.shapecheck` compares a Pod against a provider's `Shapes`.
Volume contents may hold Secret bytes: their repr names files, never contents (I4).
Tests: tests/providers/test_shapecheck.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

# Feature words a provider's `Shapes` lists, as `providers.shapecheck` names them.
PROBE_KINDS = ("exec", "tcpSocket", "httpGet", "grpc")
VOLUME_KINDS = ("configMap", "secret", "downwardAPI", "projected", "emptyDir")


@dataclass(frozen=True)
class Mount:
    """One `volumeMounts` entry: the volume `volume` at `path` (a `sub_path` of it, if set)."""

    volume: str
    path: str
    sub_path: str = ""
    read_only: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """One container's program, as the provider runs it. `sidecar`: an init container with
    `restartPolicy: Always` (a native sidecar: started in order with the init containers,
    kept running beside the app containers, stopped after them)."""

    name: str
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str | None = None
    ports: tuple[int, ...] = ()
    stdin: bool = False
    tty: bool = False
    mounts: tuple[Mount, ...] = ()
    sidecar: bool = False


@dataclass(frozen=True)
class VolumeFile:
    """One file of a volume: `path` relative to the volume's root (no `..`), its bytes, its mode."""

    path: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True, repr=False)
class Volume:
    """One Pod volume with its contents resolved (`files`; none for an `emptyDir`)."""

    name: str
    kind: str  # one of VOLUME_KINDS
    files: tuple[VolumeFile, ...] = ()
    default_mode: int = 0o644

    def __repr__(self) -> str:
        return f"Volume(name={self.name!r}, kind={self.kind!r}, files={sorted(f.path for f in self.files)})"


class ContainerState(str, enum.Enum):
    WAITING = "waiting"  # not started yet (init containers before it still run), or ended and not yet restarted
    RUNNING = "running"
    TERMINATED = "terminated"  # its last run ended; `exit_code` says how


@dataclass(frozen=True)
class ContainerFacts:
    """What a provider that runs several containers knows of one of them.

    `runs` counts this container's starts in the instance (0: never started); a container
    that ended shows TERMINATED with `exit_code`, `exit_reason` (empty: the vnode derives it)
    and `finished_at` until `Restarter.restart` runs it again. `init`: an init container
    (sidecars included)."""

    name: str
    state: ContainerState
    init: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    exit_reason: str = ""
    message: str = ""
    runs: int = 0


@dataclass(frozen=True)
class Shapes:
    """Which Pod shapes a provider serves (design I9); everything else is refused by name.

    A Pod with one app container, no init containers, no probes and no volumes is served by
    every provider. `probes` and `volumes` list the kinds served (PROBE_KINDS, VOLUME_KINDS):
    probes are run by the manager (exec through the provider's `Executor`; TCP and HTTP
    against the instance's endpoint), so a provider lists the kinds it can be reached for."""

    several_containers: bool = False
    init_containers: bool = False
    sidecars: bool = False
    probes: frozenset[str] = field(default_factory=frozenset)
    volumes: frozenset[str] = field(default_factory=frozenset)


SINGLE_CONTAINER = Shapes()
