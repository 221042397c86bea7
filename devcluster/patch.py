"""The three PATCH flavours the API server accepts: JSON merge (RFC 7386), strategic merge, JSON patch (RFC 6902).

The resource layer calls one of these with the stored object and the request body and
stores the result. All three are pure: they never mutate their inputs, and strategic
merge directives (`$patch`, `$setElementOrder/…`, `$retainKeys`, `$deleteFromPrimitiveList/…`)
are applied, never stored. Failures raise `PatchError` (the caller answers 400/422).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from devcluster.clone import clone

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """A patch that cannot be applied (bad document, bad path, failed `test`, unknown directive)."""


@dataclass(frozen=True)
class _Field:
    """How one field merges: `merge` lists merge (by `merge_key`, or as a set of scalars when None)."""

    strategy: str = "replace"
    merge_key: str | None = None
    schema: _Schema | None = None


@dataclass(frozen=True)
class _Schema:
    """The fields of one object type that do not merge the default way; other fields merge as maps."""

    fields: Mapping[str, _Field] = dataclass_field(default_factory=dict)

    def field(self, name: str) -> _Field:
        return self.fields.get(name) or _Field(schema=_EMPTY)


_EMPTY = _Schema()


def _by(key: str, schema: _Schema = _EMPTY) -> _Field:
    return _Field("merge", key, schema)


def _nested(schema: _Schema) -> _Field:
    return _Field(schema=schema)


# patchStrategy/patchMergeKey tags of the built-in Go types kubectl patches (k8s.io/api core/v1, meta/v1).
_CONTAINER = _Schema(
    {
        "env": _by("name"),
        "ports": _by("containerPort"),
        "volumeMounts": _by("mountPath"),
        "volumeDevices": _by("devicePath"),
    }
)
_POD_SPEC = _Schema(
    {
        "containers": _by("name", _CONTAINER),
        "initContainers": _by("name", _CONTAINER),
        "ephemeralContainers": _by("name", _CONTAINER),
        "volumes": _by("name"),
        "imagePullSecrets": _by("name"),
        "hostAliases": _by("ip"),
        "topologySpreadConstraints": _by("topologyKey"),
        "schedulingGates": _by("name"),
        "resourceClaims": _by("name"),
    }
)
_META = _Schema({"finalizers": _Field("merge"), "ownerReferences": _by("uid")})
_POD_STATUS = _Schema({"conditions": _by("type"), "podIPs": _by("ip"), "hostIPs": _by("ip")})
_TEMPLATE = _Schema({"metadata": _nested(_META), "spec": _nested(_POD_SPEC)})
_WORKLOAD = _Schema({"metadata": _nested(_META), "spec": _nested(_Schema({"template": _nested(_TEMPLATE)}))})
_ROOTS: dict[str, _Schema] = {
    "Pod": _Schema({"metadata": _nested(_META), "spec": _nested(_POD_SPEC), "status": _nested(_POD_STATUS)}),
    "PodTemplate": _Schema({"metadata": _nested(_META), "template": _nested(_TEMPLATE)}),
    "Node": _Schema(
        {
            "metadata": _nested(_META),
            "spec": _nested(_Schema({"podCIDRs": _Field("merge")})),
            "status": _nested(_Schema({"conditions": _by("type"), "addresses": _by("type")})),
        }
    ),
    "Namespace": _Schema({"metadata": _nested(_META), "status": _nested(_Schema({"conditions": _by("type")}))}),
    "Service": _Schema({"metadata": _nested(_META), "spec": _nested(_Schema({"ports": _by("port")}))}),
    **{kind: _WORKLOAD for kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")},
}


def _root_schema(kind: str) -> _Schema:
    return _ROOTS.get(kind) or _Schema({"metadata": _nested(_META)})


def json_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = clone(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = {}
                result[key] = current
            _merge_into(current, value)
        else:
            result[key] = copy.deepcopy(value)


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """Apply a Kubernetes strategic merge patch to an object of `kind` (e.g. "Pod").

    Maps merge and `null` deletes; lists the built-in types declare as merge lists merge by
    their key (containers by `name`, ports by `containerPort`, ...), primitive merge lists
    (finalizers) merge as sets, every other list is replaced whole.
    """
    if not isinstance(target, dict) or not isinstance(patch, dict):
        raise PatchError("a strategic merge patch and its target must both be JSON objects")
    merged = _merge_map(clone(target), patch, _root_schema(kind))
    return merged if merged is not None else {}


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: _Schema) -> dict[str, Any] | None:
    """Merge `patch` into `original` (owned by the caller, mutated). None means "delete this map"."""
    directive = patch.get(_PATCH)
    if directive == "delete":
        return None
    if directive == "replace":
        original = {}
    elif directive not in (None, "merge"):
        raise PatchError(f"unknown patch directive {_PATCH}: {directive!r}")
    retain = patch.get(_RETAIN_KEYS)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError(f"{_RETAIN_KEYS} must be a list")
        original = {k: v for k, v in original.items() if k in retain}
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            if isinstance(original.get(field), list):
                original[field] = [item for item in original[field] if item not in value]
        elif key.startswith("$"):
            if key != _PATCH and key != _RETAIN_KEYS and not key.startswith(_SET_ORDER):
                raise PatchError(f"unknown patch directive {key!r}")
        elif value is None:
            original.pop(key, None)
        else:
            merged = _merge_value(original.get(key), value, schema.field(key))
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
    for key, order in patch.items():
        if key.startswith(_SET_ORDER):
            field = key[len(_SET_ORDER) :]
            if isinstance(original.get(field), list) and isinstance(order, list):
                original[field] = _apply_order(original[field], order, schema.field(field).merge_key)
    return original


def _merge_value(original: Any, patch: Any, rule: _Field) -> Any:
    if isinstance(patch, dict):
        base = original if isinstance(original, dict) else {}
        return _merge_map(base, patch, rule.schema or _EMPTY)
    if isinstance(patch, list):
        if rule.strategy == "merge":
            base_list = original if isinstance(original, list) else []
            return _merge_list(base_list, patch, rule)
        return [_clean(item, rule.schema or _EMPTY) for item in patch]
    return copy.deepcopy(patch)


def _clean(item: Any, schema: _Schema) -> Any:
    """A patch value taken whole: merged into nothing, so directives and nulls are dropped."""
    if isinstance(item, dict):
        return _merge_map({}, item, schema)
    return copy.deepcopy(item)


def _merge_list(original: list[Any], patch: list[Any], rule: _Field) -> list[Any]:
    if any(isinstance(item, dict) and item.get(_PATCH) == "replace" for item in patch):
        rest = [item for item in patch if not (isinstance(item, dict) and _PATCH in item)]
        return [_clean(item, rule.schema or _EMPTY) for item in rest]
    if rule.merge_key is None:
        result = list(original)
        for item in patch:
            if item not in result:
                result.append(copy.deepcopy(item))
        return result
    key = rule.merge_key
    result = list(original)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"list items must be objects with the merge key {key!r}: {item!r}")
        index = next((i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get(_PATCH) == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            merged = _merge_map({}, item, rule.schema or _EMPTY)
            if merged is not None:
                result.append(merged)
        else:
            merged = _merge_map(result[index], item, rule.schema or _EMPTY)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result


def _apply_order(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    """Reorder per `$setElementOrder`: listed items first in that order, the rest after, as they were."""

    def identity(item: Any) -> Any:
        if merge_key is not None and isinstance(item, dict):
            return item.get(merge_key)
        return item

    wanted = [identity(entry) for entry in order]
    ordered: list[Any] = []
    remaining = list(items)
    for ident in wanted:
        for index, item in enumerate(remaining):
            if identity(item) == ident:
                ordered.append(remaining.pop(index))
                break
    return ordered + remaining


def json_patch(target: Any, ops: list[Any]) -> Any:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test) to a copy of `target`."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for number, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"operation {number} is not an object")
        document = _apply_operation(document, op)
    return document


def _apply_operation(document: Any, op: dict[str, Any]) -> Any:
    name = op.get("op")
    path = _pointer(op, "path")
    if name == "add":
        return _add(document, path, copy.deepcopy(_required(op, "value")))
    if name == "remove":
        return _remove(document, path)[0]
    if name == "replace":
        value = copy.deepcopy(_required(op, "value"))
        document, _ = _remove(document, path)
        return _add(document, path, value)
    if name in ("move", "copy"):
        source = _pointer(op, "from")
        if name == "move":
            if path[: len(source)] == source and len(path) > len(source):
                raise PatchError(f"cannot move {op['from']!r} into its own child {op['path']!r}")
            document, value = _remove(document, source)
        else:
            value = copy.deepcopy(_get(document, source))
        return _add(document, path, value)
    if name == "test":
        if not _json_equal(_get(document, path), _required(op, "value")):
            raise PatchError(f"test operation failed at {op['path']!r}")
        return document
    raise PatchError(f"unknown JSON patch operation {name!r}")


def _required(op: dict[str, Any], field: str) -> Any:
    if field not in op:
        raise PatchError(f"operation {op.get('op')!r} needs a {field!r} member")
    return op[field]


def _pointer(op: dict[str, Any], field: str) -> list[str]:
    text = _required(op, field)
    if not isinstance(text, str) or (text and not text.startswith("/")):
        raise PatchError(f"invalid JSON pointer {text!r}")
    if not text:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of range")
    return index


def _get(document: Any, path: list[str]) -> Any:
    current = document
    for token in path:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f"path /{'/'.join(path)} does not exist")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, allow_end=False)]
        else:
            raise PatchError(f"path /{'/'.join(path)} does not exist")
    return current


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(document, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, allow_end=True), value)
    else:
        raise PatchError(f"cannot add at /{'/'.join(path)}: parent is not a container")
    return document


def _remove(document: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        return None, document
    parent = _get(document, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"path /{'/'.join(path)} does not exist")
        return document, parent.pop(token)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, token, allow_end=False))
    raise PatchError(f"path /{'/'.join(path)} does not exist")


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: unlike Python's ==, `true` never equals `1`."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and bool(left == right)
