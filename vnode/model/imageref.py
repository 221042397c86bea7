"""Image references as a kubelet reports them: a container's `imageID` and `containerID`.

`image_id` follows containerd's image reference rules (the docker/distribution normalization:
a name without a registry is on `docker.io`, a one-part name is in `library/`, no tag is
`:latest`). A kubelet's `imageID` is the repository digest of the image it pulled,
`docker.io/library/busybox@sha256:...`; Nebula knows a digest only when the Pod pins one
(`busybox@sha256:...`), and otherwise reports the fully-qualified reference it asked for,
`docker.io/library/busybox:1.36` (a provider reports no digest it pulled). `container_id` is
`nebula://<instance id>/<container>`: the kubelet's `<runtime>://<id>` form, distinct per
container of an instance.

Called by `vnode.model.status` and `vnode.model.containerstatus`. Pure; never does I/O.
Tests: tests/vnode/test_status_details.py.
"""

from __future__ import annotations

import sys

RUNTIME = "nebula"
DEFAULT_REGISTRY = "docker.io"
_DOCKER_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")


def normalized(image: str) -> tuple[str, str, str]:
    """(repository with its registry, tag, digest) of an image reference, as containerd
    normalizes it: `busybox` -> (`docker.io/library/busybox`, `latest`, ``)."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:  # a colon after the last slash is a tag (before it, a registry's port)
        name, tag = name[:colon], name[colon + 1 :]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DEFAULT_REGISTRY, name
    if registry in _DOCKER_HUB_ALIASES:
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    if not tag and not digest:
        tag = "latest"
    return f"{registry}/{path}", tag, digest


def image_id(image: str) -> str:
    """The container's `imageID`: `<repository>@<digest>` when the reference pins a digest,
    else the fully-qualified `<repository>:<tag>` ("" for no image)."""
    if not image:
        return ""
    repository, tag, digest = normalized(image)
    return f"{repository}@{digest}" if digest else f"{repository}:{tag}"


def container_id(instance_id: str, container: str) -> str:
    """The container's `containerID`: `nebula://<instance id>/<container>`."""
    return f"{RUNTIME}://{instance_id}/{container}"


def identify(entry: dict[str, object], instance_id: str) -> None:
    """Set `containerID` and `imageID` of one container status (its `name` and `image`) whose
    container runs in `instance_id`."""
    entry["containerID"] = container_id(instance_id, str(entry["name"]))
    entry["imageID"] = sys.intern(image_id(str(entry.get("image") or "")))  # many Pods, one image


def instance_of(container_id: str) -> str:
    """The instance a Nebula containerID names (`nebula://i-1` or `nebula://i-1/main` -> `i-1`);
    "" for none."""
    runtime, found, rest = container_id.partition("://")
    if not found or runtime != RUNTIME:
        return ""
    return rest.split("/", 1)[0]
