"""The Pod's volumes on an EC2 instance: the user-data lines that write each volume's files
under a per-Pod folder (modes kept), and each container's `docker run -v` bind mounts.

Called by `userdata` while it renders the boot script. Pure. File contents travel base64 in
the script (Secret bytes among them): the script is secret material, so nothing here is
logged, and no error names a file's contents. Secret and projected volumes sit on a tmpfs,
as the kubelet keeps them off the disk.
Tests: tests/providers/aws/test_aws_userdata.py.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
from collections.abc import Sequence

from providers.errors import InvalidRequest
from providers.shape import ContainerSpec, Volume

VOLUME_DIR = "/var/lib/nebula/volumes"  # one folder per volume: <VOLUME_DIR>/<volume name>
TMPFS_KINDS = frozenset({"secret", "projected"})


def volume_dir(volume: str, *, root: str = "") -> str:
    """The instance folder holding `volume` (`root` stands for `/`: tests run the script elsewhere)."""
    return f"{root}{VOLUME_DIR}/{volume}"


def _checked(path: str, what: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or ":" in path:
        raise InvalidRequest(f"{what}: the path {path!r} must be relative, without '..' or ':'")
    return path


def write_volumes(volumes: Sequence[Volume], containers: Sequence[ContainerSpec], *, root: str = "") -> str:
    """Bash lines that create every volume's folder and files (each with its mode) and every
    subPath a container mounts. Files are written under umask 077, then given their mode."""
    if not volumes:
        return ""
    lines = ["umask 077", f"install -d -m 755 {shlex.quote(f'{root}{VOLUME_DIR}')}"]
    for volume in volumes:
        folder = volume_dir(_checked(volume.name, "a volume name"), root=root)
        lines.append(f"install -d -m 755 {shlex.quote(folder)}")
        if volume.kind in TMPFS_KINDS:
            lines.append(
                f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(folder)} || say 'volume {volume.name}: no tmpfs'"
            )
        for item in volume.files:
            path = f"{folder}/{_checked(item.path, f'volume {volume.name}')}"
            parent = posixpath.dirname(path)
            if parent != folder:
                lines.append(f"install -d -m 755 {shlex.quote(parent)}")
            encoded = base64.b64encode(item.data).decode("ascii")
            lines.append(f"printf '%s' {shlex.quote(encoded)} | base64 -d > {shlex.quote(path)}")
            lines.append(f"chmod {item.mode & 0o7777:o} {shlex.quote(path)}")
    for container in containers:
        for mount in container.mounts:
            if mount.sub_path:
                host = f"{volume_dir(mount.volume, root=root)}/{_checked(mount.sub_path, 'a subPath')}"
                lines.append(f"[ -e {shlex.quote(host)} ] || install -d -m 755 {shlex.quote(host)}")
    lines.append("umask 022")
    return "\n".join(lines)


def mount_args(container: ContainerSpec, volumes: Sequence[Volume], *, root: str = "") -> list[str]:
    """`-v host:mountPath[:ro]` for each of the container's mounts (a subPath inside its volume).
    InvalidRequest for a mount of a volume the Pod does not define."""
    names = {volume.name for volume in volumes}
    args: list[str] = []
    for mount in container.mounts:
        if mount.volume not in names:
            raise InvalidRequest(f"container {container.name} mounts volume {mount.volume!r}, which the Pod lacks")
        if not mount.path.startswith("/") or ":" in mount.path:
            raise InvalidRequest(f"container {container.name}: mountPath {mount.path!r} must be absolute, no ':'")
        host = volume_dir(mount.volume, root=root)
        if mount.sub_path:
            host = f"{host}/{_checked(mount.sub_path, 'a subPath')}"
        args += ["-v", f"{host}:{mount.path}" + (":ro" if mount.read_only else "")]
    return args
