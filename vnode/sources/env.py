"""Resolve every container's environment the way the kubelet does, before `provision`.

Called by `vnode.phases.provision` with the Pod's `PodFields` (read once from its JSON at the door,
shared with `vnode.sources.volumes` and `vnode.sources.pullsecrets`) and a reader for Secrets and ConfigMaps;
`vnode.sources.volumes` shares its `fieldRef`/`resourceFieldRef` readers. Per container, order:
every `envFrom` source in listed order (with its prefix), then `env` entries, which win;
`$(VAR)` references expand against what that container defined so far; `resourceFieldRef`
reads its own resources.
Values are secrets (I4): never logged; errors name keys and objects, never values
(tests/vnode/test_env.py::test_I4_env_errors_and_reprs_never_carry_values).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from typing import Any

from providers.podspec import parse_quantity

# Reads an object's `data` (base64-decoded for Secrets); None means NotFound. Any other
# failure raises, and is treated as "could not read" even for optional references.
Reader = Callable[[str, str], Mapping[str, str] | None]

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_FIELD_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


@dataclass(frozen=True)
class PodFields:
    """What the sources (env, volumes, image pull secrets) read of a Pod, taken from its JSON
    once (`of`): its identity, labels and annotations (the downward API), the containers'
    specs (their env, envFrom and resources), its volumes and its image pull Secrets' names.
    `namespace` is as written ("" if none): `source_namespace` is where its objects are read."""

    namespace: str = ""
    name: str = ""
    uid: str = ""
    node_name: str = ""
    service_account: str = ""
    labels: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)
    containers: tuple[Mapping[str, Any], ...] = ()
    init_containers: tuple[Mapping[str, Any], ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    pull_secrets: tuple[str, ...] = ()  # as listed ("" for an entry with no name)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodFields:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            node_name=str(spec.get("nodeName") or ""),
            service_account=str(spec.get("serviceAccountName") or ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            containers=tuple(spec.get("containers") or ()),
            init_containers=tuple(spec.get("initContainers") or ()),
            volumes=tuple(spec.get("volumes") or ()),
            pull_secrets=tuple(str((ref or {}).get("name") or "") for ref in spec.get("imagePullSecrets") or ()),
        )

    @property
    def source_namespace(self) -> str:
        """Where the Pod's Secrets and ConfigMaps are read (`default` for a Pod naming none)."""
        return self.namespace or "default"


@dataclass(frozen=True)
class MissingSource:
    """The object a mandatory reference needs: the Pod is retried when it appears."""

    kind: str  # "Secret" or "ConfigMap"
    namespace: str
    name: str


class EnvError(Exception):
    """The environment cannot be resolved; `reason` is a virtual-kubelet Event reason
    (`MandatorySecretNotFound`, ...). `kubelet` is what a kubelet says of it, the message of
    the container's `CreateContainerConfigError` (`secret "x" not found`, `couldn't find key k
    in Secret ns/x`). `failed`, set by `resolve_pod_env`: every container whose environment
    cannot be resolved, by name, with its `kubelet` message (init containers first, in order).
    `unread`: the object could not be read at all (the API did not answer): no verdict yet."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        missing: MissingSource | None = None,
        kubelet: str = "",
        unread: bool = False,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.missing = missing
        self.kubelet = kubelet or message
        self.unread = unread
        self.failed: dict[str, str] = {}


@dataclass
class ResolvedEnv:
    values: dict[str, str] = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (Event reason, message)

    def __repr__(self) -> str:
        return f"ResolvedEnv({len(self.values)} keys: {','.join(sorted(self.values))}, warnings={self.warnings})"


class _Sources:
    """Memoised reads of one Pod's Secrets and ConfigMaps."""

    def __init__(self, namespace: str, read_secret: Reader, read_configmap: Reader) -> None:
        self.namespace = namespace
        self._readers = {"Secret": read_secret, "ConfigMap": read_configmap}
        self._cache: dict[tuple[str, str], Mapping[str, str] | None] = {}

    def read(self, kind: str, name: str, *, optional: bool) -> Mapping[str, str] | None:
        key = (kind, name)
        if key not in self._cache:
            try:
                self._cache[key] = self._readers[kind](self.namespace, name)
            except Exception as exc:
                word = "Optional" if optional else "Mandatory"
                raise EnvError(
                    f"FailedToRead{word}{kind}",
                    f"could not read {kind} {self.namespace}/{name}: {type(exc).__name__}",
                    unread=True,
                ) from exc
        data = self._cache[key]
        if data is None and not optional:
            raise EnvError(
                f"Mandatory{kind}NotFound",
                f"{kind} {self.namespace}/{name} not found",
                missing=MissingSource(kind, self.namespace, name),
                kubelet=f'{kind.lower()} "{name}" not found',  # the API's NotFound for the kubelet's `secret` resource
            )
        return data


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    """A Secret's base64 `data` as text (undecodable bytes replaced)."""
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (data or {}).items()}


def expand(text: str, defined: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, `$$` is a literal `$`,
    anything else is left as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(defined[name] if name in defined else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def format_map(values: Mapping[str, Any]) -> str:
    """Labels or annotations as the kubelet's downward API writes them: `key="value"` lines,
    sorted by key, each value quoted as Go's `%q` quotes it."""
    return "\n".join(f"{k}={go_quote(str(v))}" for k, v in sorted(values.items()))


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               "\\": "\\\\", '"': '\\"'}  # fmt: skip


def go_quote(text: str) -> str:
    """`text` as Go's `strconv.Quote` writes it (the kubelet formats label values with `%q`)."""
    out = []
    for char in text:
        code = ord(char)
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def field_value(pod: PodFields, path: str) -> str:
    """The Pod field a `fieldRef` names (ValueError: a path the kubelet does not serve)."""
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "spec.nodeName": pod.node_name,
        "spec.serviceAccountName": pod.service_account,
    }
    if path in simple:
        return simple[path]
    maps = {"labels": pod.labels, "annotations": pod.annotations}
    if path in ("metadata.labels", "metadata.annotations"):
        return format_map(maps[path.split(".")[1]])
    match = _FIELD_SUBSCRIPT.match(path)
    if match:
        return str(maps[match.group(1)].get(match.group(2), ""))
    raise ValueError(f"unsupported fieldPath {path!r}")


def find_container(pod: PodFields, name: str) -> Mapping[str, Any]:
    """The app or init container called `name` (ValueError: the Pod has none)."""
    for container in [*pod.containers, *pod.init_containers]:
        if container.get("name") == name:
            return dict(container)
    raise ValueError(f"container {name!r} not found")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """The container's request or limit a `resourceFieldRef` names, in units of its divisor,
    rounded up (ValueError: a resource the kubelet does not serve, or a zero divisor)."""
    resource = str(ref.get("resource", ""))
    section, _, name = resource.partition(".")
    if section not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ValueError(f"unsupported resourceFieldRef {resource!r}")
    raw = ((container.get("resources") or {}).get(section) or {}).get(name)
    if raw is None:
        return "0"
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor == 0:
        raise ValueError(f"resourceFieldRef {resource!r} has a zero divisor")
    return str(int((parse_quantity(raw) / divisor).to_integral_value(rounding=ROUND_CEILING)))


def _from_source(sources: _Sources, source: Mapping[str, Any], result: ResolvedEnv, values: dict[str, str]) -> None:
    for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
        ref = source.get(key)
        if not ref:
            continue
        optional = bool(ref.get("optional"))
        data = sources.read(kind, str(ref.get("name", "")), optional=optional)
        if data is None:
            result.warnings.append(
                (f"Optional{kind}NotFound", f"{kind} {sources.namespace}/{ref.get('name')} not found")
            )
            continue
        prefix = str(source.get("prefix") or "")
        invalid = sorted(prefix + k for k in data if not _ENV_NAME.match(prefix + k))
        if invalid:
            result.warnings.append(("InvalidEnvironmentVariableNames", f"skipped invalid names: {', '.join(invalid)}"))
        values.update({prefix + k: v for k, v in data.items() if _ENV_NAME.match(prefix + k)})


def _from_key_ref(sources: _Sources, kind: str, ref: Mapping[str, Any], result: ResolvedEnv) -> str | None:
    optional = bool(ref.get("optional"))
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    data = sources.read(kind, name, optional=optional)
    if data is None:
        result.warnings.append((f"Optional{kind}NotFound", f"{kind} {sources.namespace}/{name} not found"))
        return None
    if key not in data:
        if optional:
            result.warnings.append(
                (f"Optional{kind}KeyNotFound", f"{kind} {sources.namespace}/{name} has no key {key!r}")
            )
            return None
        raise EnvError(
            f"Mandatory{kind}KeyNotFound",
            f"{kind} {sources.namespace}/{name} has no key {key!r}",
            kubelet=f"couldn't find key {key} in {kind} {sources.namespace}/{name}",
        )
    return data[key]


def resolve_env(pod: PodFields, *, read_secret: Reader, read_configmap: Reader) -> ResolvedEnv:
    """The first app container's environment, fully resolved. Raises EnvError."""
    if not pod.containers:
        return ResolvedEnv()
    return _resolve_container(pod, pod.containers[0], _Sources(pod.source_namespace, read_secret, read_configmap))


@dataclass
class PodEnv:
    """Every container's resolved environment by name (init containers first, in order);
    `first`: the first app container's name. `warnings` are told once each."""

    containers: dict[str, dict[str, str]] = field(default_factory=dict)
    first: str = ""
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def __repr__(self) -> str:
        keys = {name: sorted(values) for name, values in self.containers.items()}
        return f"PodEnv(containers={keys}, first={self.first!r}, warnings={self.warnings})"


def resolve_pod_env(pod: PodFields, *, read_secret: Reader, read_configmap: Reader) -> PodEnv:
    """The environment of every container (init and app), each resolved against its own
    `env`, `envFrom` and resources; each Secret or ConfigMap is read once. Raises the first
    container's EnvError, its `failed` naming every container that cannot be resolved (a
    kubelet tells each container's `CreateContainerConfigError` on its own)."""
    sources = _Sources(pod.source_namespace, read_secret, read_configmap)
    result = PodEnv(first=str(pod.containers[0].get("name", "")) if pod.containers else "")
    first: EnvError | None = None
    failed: dict[str, str] = {}
    for container in [*pod.init_containers, *pod.containers]:
        name = str(container.get("name", ""))
        try:
            resolved = _resolve_container(pod, container, sources)
        except EnvError as exc:
            first = first or exc
            failed[name] = exc.kubelet
            continue
        result.containers[name] = resolved.values
        result.warnings.extend(w for w in resolved.warnings if w not in result.warnings)
    if first is not None:
        first.failed = failed
        raise first
    return result


def _resolve_container(pod: PodFields, container: Mapping[str, Any], sources: _Sources) -> ResolvedEnv:
    result = ResolvedEnv()
    values: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        _from_source(sources, source, result, values)
    for entry in container.get("env") or []:
        name = str(entry.get("name", ""))
        value_from = entry.get("valueFrom")
        if not value_from:
            values[name] = expand(str(entry.get("value") or ""), values)
            continue
        value = _value_from(pod, container, sources, name, value_from, result)
        if value is not None:
            values[name] = value
    result.values = values
    return result


def _value_from(
    pod: PodFields,
    container: Mapping[str, Any],
    sources: _Sources,
    name: str,
    value_from: Mapping[str, Any],
    result: ResolvedEnv,
) -> str | None:
    try:
        if value_from.get("fieldRef"):
            return field_value(pod, str(value_from["fieldRef"].get("fieldPath", "")))
        if ref := value_from.get("resourceFieldRef"):
            named = str(ref.get("containerName") or "")
            return resource_value(find_container(pod, named) if named else container, ref)
    except ValueError as exc:
        raise EnvError("ConfigError", f"{exc} in env") from exc
    if value_from.get("secretKeyRef"):
        return _from_key_ref(sources, "Secret", value_from["secretKeyRef"], result)
    if value_from.get("configMapKeyRef"):
        return _from_key_ref(sources, "ConfigMap", value_from["configMapKeyRef"], result)
    raise EnvError("ConfigError", f"env {name!r} has an empty valueFrom")
