"""Resolve a Pod's volumes into their files, laid out as the kubelet's volume plugins lay them out.

Called by `vnode.phases.provision` before `provision`, with byte readers of Secrets and ConfigMaps.
Serves configMap, secret, downwardAPI, projected (of those sources) and emptyDir; any other
kind is skipped here (`providers.shapecheck` refuses it before). Raises `InvalidVolume` for a
field the API server's validation rejects (the Pod is refused, the field named) and
`MountError` for what the kubelet reports as `FailedMount` (retried; a missing mandatory
object is named, and its creation retries the Pod). Contents may be Secret bytes (I4): errors
and reprs name volumes, objects, keys and paths, never contents; see
tests/vnode/test_volumes.py::test_I4_volume_errors_and_reprs_never_carry_contents.
Tests: tests/vnode/test_volumes.py.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kube import names
from providers.shape import VOLUME_KINDS, Volume, VolumeFile
from vnode.sources.env import MissingSource, PodFields, field_value, find_container, resource_value

# Reads an object's data as bytes (a Secret's decoded; a ConfigMap's `data` and `binaryData`);
# None means NotFound. Any other failure raises, and the mount is retried.
BytesReader = Callable[[str, str], Mapping[str, bytes] | None]


DEFAULT_MODE = 0o644  # the API server's default `defaultMode` for every kind here
# The fields a downwardAPI volume may name (the API server's validation), and their subscripts.
DOWNWARD_FIELDS = ("metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid")
DOWNWARD_SUBSCRIPTED = ("metadata.annotations", "metadata.labels")
DOWNWARD_RESOURCES = tuple(
    f"{section}.{name}" for section in ("limits", "requests") for name in ("cpu", "memory", "ephemeral-storage")
)

# The kubelet's words for an item naming a key the object lacks (pkg/volume/configmap, secret).
_LACKS_KEY = {
    "ConfigMap": "configmap references non-existent config key",
    "Secret": "references non-existent secret key",
}

JsonDict = Mapping[str, Any]
Payload = dict[str, VolumeFile]


class MountError(Exception):
    """The volume cannot be set up now: the kubelet's `FailedMount`, retried. `missing`: the
    ConfigMap or Secret whose creation should retry the Pod at once."""

    reason = names.EVENT_FAILED_MOUNT

    def __init__(self, volume: str, cause: str, *, missing: MissingSource | None = None) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {cause}')
        self.volume = volume
        self.cause = cause
        self.missing = missing


class InvalidVolume(ValueError):
    """A volume field the API server's validation rejects; the message names the field."""


class _Objects:
    """Memoised reads of one Pod's Secrets and ConfigMaps."""

    def __init__(self, namespace: str, *, read_secret: BytesReader, read_configmap: BytesReader) -> None:
        self.namespace = namespace
        self._readers = {"Secret": read_secret, "ConfigMap": read_configmap}
        self._cache: dict[tuple[str, str], Mapping[str, bytes] | None] = {}

    def read(self, kind: str, name: str, *, volume: str, optional: bool) -> Mapping[str, bytes]:
        """The object's data; empty for a missing optional one. Raises MountError."""
        if (kind, name) not in self._cache:
            try:
                self._cache[kind, name] = self._readers[kind](self.namespace, name)
            except Exception as exc:
                raise MountError(volume, f'could not read {kind.lower()} "{name}": {type(exc).__name__}') from exc
        data = self._cache[kind, name]
        if data is not None:
            return data
        if optional:
            return {}
        missing = MissingSource(kind, self.namespace, name)
        raise MountError(volume, f'{kind.lower()} "{name}" not found', missing=missing)


def resolve_volumes(pod: PodFields, *, read_secret: BytesReader, read_configmap: BytesReader) -> tuple[Volume, ...]:
    """Every served volume of the Pod with its files (relative paths, modes), in the Pod's
    order. Validates every volume before reading any object. Raises InvalidVolume, MountError."""
    check_volumes(pod)
    objects = _Objects(pod.source_namespace, read_secret=read_secret, read_configmap=read_configmap)
    resolved = []
    for volume in pod.volumes:
        kind = volume_kind(volume)
        if kind is None:
            continue
        name, source = str(volume.get("name", "")), volume.get(kind) or {}
        default_mode = _mode(source.get("defaultMode"), DEFAULT_MODE)
        payload = _payload(pod, kind, source, objects, volume=name, default_mode=default_mode)
        files = tuple(_files(payload, volume=name))
        resolved.append(Volume(name, kind, files=files, default_mode=default_mode))
    return tuple(resolved)


def _payload(
    pod: PodFields, kind: str, source: JsonDict, objects: _Objects, *, volume: str, default_mode: int
) -> Payload:
    if kind == "configMap":
        return _keyed(objects, "ConfigMap", source, name_key="name", volume=volume, default_mode=default_mode)
    if kind == "secret":
        return _keyed(objects, "Secret", source, name_key="secretName", volume=volume, default_mode=default_mode)
    if kind == "downwardAPI":
        return _downward(pod, source.get("items") or [], default_mode=default_mode)
    if kind == "projected":
        return _projected(pod, source.get("sources") or [], objects, volume=volume, default_mode=default_mode)
    return {}  # emptyDir: an empty folder


def _keyed(objects: _Objects, kind: str, source: JsonDict, *, name_key: str, volume: str, default_mode: int) -> Payload:
    """A ConfigMap's or Secret's keys as files: all of them, or only `items` (key -> path, mode).
    Without `items`, every key of the object is a file named after it."""
    name, optional, items = str(source.get(name_key, "")), bool(source.get("optional")), source.get("items") or []
    data = objects.read(kind, name, volume=volume, optional=optional)
    if not items:
        return {key: VolumeFile(key, bytes(value), default_mode) for key, value in data.items()}
    payload: Payload = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in data:
            if optional:
                continue
            raise MountError(volume, f"{_LACKS_KEY[kind]}: {key}")
        path = posixpath.normpath(str(item.get("path", "")))
        payload[path] = VolumeFile(path, bytes(data[key]), _mode(item.get("mode"), default_mode))
    return payload


def _downward(pod: PodFields, items: Iterable[JsonDict], *, default_mode: int) -> Payload:
    """Pod fields and container resources as files (paths and fields already validated)."""
    payload: Payload = {}
    for item in items:
        path = posixpath.normpath(str(item.get("path", "")))
        if field_ref := item.get("fieldRef"):
            text = field_value(pod, str(field_ref.get("fieldPath", "")))
        else:
            ref = item.get("resourceFieldRef") or {}
            text = resource_value(find_container(pod, str(ref.get("containerName", ""))), ref)
        payload[path] = VolumeFile(path, text.encode(), _mode(item.get("mode"), default_mode))
    return payload


def _projected(
    pod: PodFields, sources: Iterable[JsonDict], objects: _Objects, *, volume: str, default_mode: int
) -> Payload:
    """Every source's files in one folder, later sources over earlier ones on a clash; the
    failures of all sources told together, as the kubelet aggregates them."""
    payload: Payload = {}
    causes: list[str] = []
    missing: MissingSource | None = None
    for source in sources:
        try:
            for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if ref := source.get(key):
                    payload |= _keyed(objects, kind, ref, name_key="name", volume=volume, default_mode=default_mode)
            if downward := source.get("downwardAPI"):
                payload |= _downward(pod, downward.get("items") or [], default_mode=default_mode)
        except MountError as exc:
            causes.append(exc.cause)
            missing = missing or exc.missing
    if causes:
        unique = list(dict.fromkeys(causes))
        raise MountError(volume, unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]", missing=missing)
    return payload


def _files(payload: Payload, *, volume: str) -> list[VolumeFile]:
    """The payload's files by path, each checked as the kubelet's atomic writer checks it
    (an object's keys become paths that the Pod's validation never saw)."""
    files = []
    for path, file in sorted(payload.items()):  # the key is the file's path
        parts = path.split("/")
        if not path:
            raise MountError(volume, "invalid path: must not be empty")
        if path.startswith("/"):
            raise MountError(volume, f"invalid path: must be relative path: {path}")
        if ".." in parts:
            raise MountError(volume, f"invalid path: must not contain '..': {path}")
        if parts[0].startswith(".."):
            raise MountError(volume, f"invalid path: must not start with '..': {path}")
        files.append(file)
    return files


def _mode(value: Any, default: int) -> int:
    return default if value is None else int(value)


# -- validation: what the API server rejects, named by field --------------------------------
def volume_kind(volume: JsonDict) -> str | None:
    """The served kind a volume is of; None for any other kind."""
    return next((kind for kind in VOLUME_KINDS if volume.get(kind) is not None), None)


def check_volumes(pod: PodFields) -> None:
    """Raise InvalidVolume for the first served volume field the API server would reject:
    paths (relative, no `..`, not starting with `..`), modes, downwardAPI fields and
    resources, projected sources and their paths (unique across sources)."""
    for index, volume in enumerate(pod.volumes):
        kind = volume_kind(volume)
        if kind is None:
            continue
        where, source = f"spec.volumes[{index}].{kind}", volume.get(kind) or {}
        _check_mode(f"{where}.defaultMode", source.get("defaultMode"))
        if kind in ("configMap", "secret"):
            _check_object(where, source, name_key="name" if kind == "configMap" else "secretName")
        elif kind == "downwardAPI":
            _check_downward(pod, where, source.get("items") or [])
        elif kind == "projected":
            _check_projected(pod, where, source.get("sources") or [])


def _check_object(where: str, source: JsonDict, *, name_key: str) -> list[str]:
    """A ConfigMap or Secret source: the object named, its items' keys, paths and modes."""
    if not source.get(name_key):
        raise InvalidVolume(f"{where}.{name_key}: Required value")
    paths = []
    for index, item in enumerate(source.get("items") or []):
        at = f"{where}.items[{index}]"
        if not item.get("key"):
            raise InvalidVolume(f"{at}.key: Required value")
        paths.append(_check_path(f"{at}.path", item.get("path")))
        _check_mode(f"{at}.mode", item.get("mode"))
    return paths


def _check_downward(pod: PodFields, where: str, items: Iterable[JsonDict]) -> list[str]:
    paths = []
    for index, item in enumerate(items):
        at = f"{where}.items[{index}]"
        paths.append(_check_path(f"{at}.path", item.get("path")))
        _check_mode(f"{at}.mode", item.get("mode"))
        field_ref, resource_ref = item.get("fieldRef"), item.get("resourceFieldRef")
        if bool(field_ref) == bool(resource_ref):
            raise InvalidVolume(f"{at}: Invalid value: exactly one of fieldRef and resourceFieldRef must be set")
        if field_ref:
            _check_field_path(f"{at}.fieldRef.fieldPath", str(field_ref.get("fieldPath") or ""))
        else:
            _check_resource(pod, f"{at}.resourceFieldRef", resource_ref or {})
    return paths


def _check_projected(pod: PodFields, where: str, sources: Iterable[JsonDict]) -> None:
    seen: set[str] = set()
    for index, source in enumerate(sources):
        at = f"{where}.sources[{index}]"
        if config_map := source.get("configMap"):
            paths = _check_object(f"{at}.configMap", config_map, name_key="name")
        elif secret := source.get("secret"):
            paths = _check_object(f"{at}.secret", secret, name_key="name")
        elif downward := source.get("downwardAPI"):
            paths = _check_downward(pod, f"{at}.downwardAPI", downward.get("items") or [])
        else:
            continue  # another source kind: providers.shapecheck names it
        for path in paths:
            if path in seen:
                raise InvalidVolume(f'{at}: Invalid value: "{path}": conflicting duplicate paths')
            seen.add(path)


def _check_path(at: str, path: Any) -> str:
    """The API server's rule for a volume's file path (validateLocalDescendingPath)."""
    text = str(path or "")
    if not text:
        raise InvalidVolume(f"{at}: Required value")
    if text.startswith("/"):
        raise InvalidVolume(f'{at}: Invalid value: "{text}": must be a relative path')
    if ".." in text.split("/"):
        raise InvalidVolume(f"{at}: Invalid value: \"{text}\": must not contain '..'")
    if text.startswith(".."):
        raise InvalidVolume(f"{at}: Invalid value: \"{text}\": must not start with '..'")
    return posixpath.normpath(text)


def _check_mode(at: str, mode: Any) -> None:
    if mode is None:
        return
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777:
        raise InvalidVolume(
            f"{at}: Invalid value: {mode!r}: must be a number between 0 and 0777 (octal), both inclusive"
        )


def _check_field_path(at: str, path: str) -> None:
    base, subscript, _ = path.partition("[")
    if path in DOWNWARD_FIELDS:
        return
    if subscript and base in DOWNWARD_SUBSCRIPTED:
        try:
            field_value(PodFields(), path)  # parses `metadata.labels['key']`
        except ValueError:
            pass
        else:
            return
    supported = ", ".join(f'"{field}"' for field in DOWNWARD_FIELDS)
    raise InvalidVolume(f'{at}: Unsupported value: "{path}": supported values: {supported}')


def _check_resource(pod: PodFields, at: str, ref: JsonDict) -> None:
    container = str(ref.get("containerName") or "")
    if not container:
        raise InvalidVolume(f"{at}.containerName: Required value")
    resource = str(ref.get("resource") or "")
    if resource not in DOWNWARD_RESOURCES:
        supported = ", ".join(f'"{name}"' for name in DOWNWARD_RESOURCES)
        raise InvalidVolume(f'{at}.resource: Unsupported value: "{resource}": supported values: {supported}')
    try:
        found = find_container(pod, container)
    except ValueError:
        raise InvalidVolume(f'{at}.containerName: Not found: "{container}"') from None
    try:
        resource_value(found, ref)
    except ValueError as exc:
        raise InvalidVolume(f"{at}: Invalid value: {exc}") from exc
