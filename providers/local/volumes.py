"""The Pod's volumes on this machine, and the paths a container sees them at.

Called by `launch.create_instance` while the instance folder is still being prepared, so every
file is in place before any container starts. Each volume is a folder `VOLUMES_DIR/<name>/`
holding its files (created 0600, then given their mode; an emptyDir starts empty). The
instance's root, `ROOT_DIR/`, holds each container's mount path as a relative symlink into
its volume (or the volume's `subPath`): `/etc/cfg` appears at `<root>/etc/cfg`. A container's
command, args and working dir are rewritten so an absolute path at or under one of its mount
paths points into the root (`rewrite`). Never logs, and never puts a file's contents in an
error: a Secret's bytes reach only their file (I4).
Tests: tests/providers/local/test_local_volumes.py.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from providers.errors import InvalidRequest
from providers.local import folder
from providers.shape import ContainerSpec, Mount, Volume

_NAME_CHARS = r"[A-Za-z0-9._~+@%,-]"  # characters that continue a path component


def mount_path(mount: Mount, *, container: str) -> str:
    """The mount's absolute path, normalised; InvalidRequest if it is not one the root can hold."""
    path = posixpath.normpath(mount.path) if mount.path else ""
    if not path.startswith("/") or path.startswith("//") or path == "/":
        raise InvalidRequest(f"container {container!r}: mount path {mount.path!r} must be an absolute path below /")
    return path


def _relative(text: str, what: str) -> str:
    """A relative path without `..` or absolute parts (a file of a volume, a subPath)."""
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if text.startswith("/") or ".." in parts:
        raise InvalidRequest(f"{what} {text!r} must be a relative path without '..'")
    return "/".join(parts)


def check_mounts(containers: Sequence[ContainerSpec], volumes: Sequence[Volume]) -> None:
    """InvalidRequest for mounts the one root of an instance cannot hold: a volume the Pod does
    not have, a path two containers mount differently, or a mount path inside another."""
    names = {volume.name for volume in volumes}
    seen: dict[str, tuple[str, str]] = {}
    for container in containers:
        for mount in container.mounts:
            if mount.volume not in names:
                raise InvalidRequest(
                    f"container {container.name!r} mounts volume {mount.volume!r}, which the Pod has not"
                )
            path = mount_path(mount, container=container.name)
            target = (mount.volume, _relative(mount.sub_path, "subPath"))
            if seen.setdefault(path, target) != target:
                raise InvalidRequest(
                    f"mount path {path!r} is mounted from different volumes by the Pod's containers: the local "
                    "provider gives an instance one root, where each path is one thing"
                )
    for path in seen:
        for other in seen:
            if other != path and other.startswith(path + "/"):
                raise InvalidRequest(
                    f"mount path {other!r} lies inside mount path {path!r}: not served by the local provider"
                )


def materialise(instance: Path, containers: Sequence[ContainerSpec], volumes: Sequence[Volume]) -> None:
    """Write every volume under `instance` (being prepared, not yet in place) and link each
    mount path into the root. OSError as it comes; InvalidRequest names a path, never contents."""
    root = instance / folder.ROOT_DIR
    root.mkdir(mode=0o700)
    for volume in volumes:
        _write_volume(instance / folder.VOLUMES_DIR / volume.name, volume)
    linked: set[str] = set()
    for container in containers:
        for mount in container.mounts:
            path = mount_path(mount, container=container.name)
            if path not in linked:
                linked.add(path)
                _link(root, path, instance / folder.VOLUMES_DIR / mount.volume, _relative(mount.sub_path, "subPath"))


def _write_volume(base: Path, volume: Volume) -> None:
    base.mkdir(parents=True, mode=0o700)
    for item in volume.files:
        relative = _relative(item.path, f"a file of volume {volume.name!r}:")
        if not relative:
            raise InvalidRequest(f"volume {volume.name!r} has a file without a name")
        target = base / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others meanwhile
        with os.fdopen(fd, "wb") as handle:
            handle.write(item.data)
            os.fchmod(handle.fileno(), item.mode & 0o7777)


def _link(root: Path, path: str, volume: Path, sub_path: str) -> None:
    """`<root><path>` as a relative symlink to the volume (or its `sub_path`, made a folder
    if the volume has nothing there, as the kubelet does)."""
    target = volume / sub_path if sub_path else volume
    if not target.exists():
        target.mkdir(parents=True, mode=0o700)
    where = root / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.symlink(os.path.relpath(target, where.parent), where)


def mount_paths(container: ContainerSpec) -> list[str]:
    return [mount_path(mount, container=container.name) for mount in container.mounts]


def rewrite(text: str, mounts: Iterable[str], root: str) -> str:
    """`text` with every absolute path at or under one of `mounts` moved into `root`.

    A mount path is rewritten only where a path starts (start of text, or after a character
    that cannot be part of a path: space, quote, `=`, `:` ...) and a path component ends (end
    of text, `/`, or such a character): with mount `/etc/cfg`, `/etc/cfg/x` and `cat /etc/cfg`
    are rewritten, `/etc/cfgx`, `/etc/cfg.d` and `/usr/etc/cfg` are not."""
    ordered = sorted(set(mounts), key=len, reverse=True)  # the longest match wins
    if not ordered:
        return text
    pattern = re.compile(
        rf"(?<!{_NAME_CHARS})(?<!/)(?:{'|'.join(re.escape(path) for path in ordered)})(?!{_NAME_CHARS})"
    )
    return pattern.sub(lambda match: root + match.group(0), text)


def rewritten(container: ContainerSpec, root: Path) -> ContainerSpec:
    """`container` with its command, args and working dir rewritten for the root."""
    mounts, base = mount_paths(container), str(root)
    if not mounts:
        return container
    return dataclasses.replace(
        container,
        command=tuple(rewrite(part, mounts, base) for part in container.command),
        args=tuple(rewrite(part, mounts, base) for part in container.args),
        working_dir=rewrite(container.working_dir, mounts, base) if container.working_dir else container.working_dir,
    )


def root_env(root: Path) -> Mapping[str, str]:
    """The env that tells a container where its root is."""
    return {"NEBULA_ROOT": str(root)}
