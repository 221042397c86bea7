"""The protobuf form of a batch/v1 Job, for `kubectl create job` (kubectl 1.32+ sends it in
protobuf): the Job spec and the Pod template fields kubectl and a hand-written manifest use.

`protobuf.decode_object` calls `job` with the already-split top-level fields, its own wire
reader (`parse`) and its error type (this module imports nothing of devcluster, so no import
circle). A field this decoder does not know raises `error` ("send JSON"): nothing is dropped.
Tests: tests/devcluster/test_jobs_kubectl.py::test_kubectl_create_get_describe_and_wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Fields = dict[int, list[Any]]
Parse = Callable[[memoryview], Fields]
_VARINT, _BYTES = 0, 2
Obj = dict[str, Any]


class _Reader:
    def __init__(self, parse: Parse, error: type[Exception]) -> None:
        self.parse, self.error = parse, error

    def fields(self, raw: memoryview | None, message: str, known: set[int]) -> Fields:
        fields = self.parse(raw if raw is not None else memoryview(b""))
        # gogo protobuf writes every non-pointer field, empty ones too: only a set one is unknown.
        unknown = sorted(n for n in set(fields) - known if any(v not in (0, b"") for _, v in fields[n]))
        if unknown:
            raise self.error(f"{message} field {unknown[0]} is not supported in protobuf, send JSON")
        return fields

    def values(self, f: Fields, number: int, wire: int) -> list[Any]:
        found = f.get(number) or []
        if any(w != wire for w, _ in found):
            raise self.error(f"field {number} has the wrong wire type")
        return [value for _, value in found]

    def text(self, f: Fields, number: int) -> str | None:
        found = self.values(f, number, _BYTES)
        return bytes(found[-1]).decode("utf-8", "strict") if found else None

    def texts(self, f: Fields, number: int) -> list[str]:
        return [bytes(v).decode("utf-8", "strict") for v in self.values(f, number, _BYTES)]

    def integer(self, f: Fields, number: int) -> int | None:
        found = self.values(f, number, _VARINT)
        if not found:
            return None
        value = int(found[-1])
        return value - (1 << 64) if value >= 1 << 63 else value

    def boolean(self, f: Fields, number: int) -> bool | None:
        value = self.integer(f, number)
        return None if value is None else bool(value)

    def message(self, f: Fields, number: int) -> memoryview | None:
        found = self.values(f, number, _BYTES)
        return found[-1] if found else None

    def string_map(self, f: Fields, number: int, value: Callable[[memoryview], Any] | None = None) -> Obj:
        result: Obj = {}
        for entry in self.values(f, number, _BYTES):
            e = self.parse(entry)
            raw = self.message(e, 2)
            data = raw if raw is not None else memoryview(b"")
            result[self.text(e, 1) or ""] = value(data) if value else bytes(data).decode("utf-8", "strict")
        return result


def _put(target: Obj, key: str, value: Any) -> None:
    if value not in (None, "", {}, []):
        target[key] = value


def job(f: Fields, parse: Parse, error: type[Exception]) -> Obj:
    r = _Reader(parse, error)
    spec = r.fields(r.message(f, 2), "JobSpec", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14})
    out: Obj = {}
    for number, key in ((1, "parallelism"), (2, "completions"), (3, "activeDeadlineSeconds")):
        _put(out, key, r.integer(spec, number))
    for number, key in ((7, "backoffLimit"), (8, "ttlSecondsAfterFinished")):
        _put(out, key, r.integer(spec, number))
    _put(out, "manualSelector", r.boolean(spec, 5))
    _put(out, "suspend", r.boolean(spec, 10))
    _put(out, "completionMode", r.text(spec, 9))
    _put(out, "podReplacementPolicy", r.text(spec, 14))
    selector = r.message(spec, 4)
    if selector is not None:
        out["selector"] = {"matchLabels": r.string_map(r.fields(selector, "LabelSelector", {1}), 1)}
    template = r.fields(r.message(spec, 6), "PodTemplateSpec", {1, 2})
    meta = r.fields(r.message(template, 1), "ObjectMeta", {1, 2, 3, 8, 11, 12})
    template_meta: Obj = {}
    _put(template_meta, "name", r.text(meta, 1))
    _put(template_meta, "labels", r.string_map(meta, 11))
    _put(template_meta, "annotations", r.string_map(meta, 12))
    out["template"] = {"metadata": template_meta, "spec": _pod_spec(r, r.message(template, 2))}
    return {"spec": out}


def _pod_spec(r: _Reader, raw: memoryview | None) -> Obj:
    f = r.fields(raw, "PodSpec", {2, 3, 4, 5, 6, 7, 8, 10, 14, 19, 20, 22, 24})
    spec: Obj = {}
    _put(spec, "containers", [_container(r, c) for c in r.values(f, 2, _BYTES)])
    _put(spec, "initContainers", [_container(r, c) for c in r.values(f, 20, _BYTES)])
    for number, key in ((3, "restartPolicy"), (6, "dnsPolicy"), (8, "serviceAccountName"), (10, "nodeName")):
        _put(spec, key, r.text(f, number))
    _put(spec, "schedulerName", r.text(f, 19))
    _put(spec, "priorityClassName", r.text(f, 24))
    _put(spec, "terminationGracePeriodSeconds", r.integer(f, 4))
    _put(spec, "activeDeadlineSeconds", r.integer(f, 5))
    _put(spec, "nodeSelector", r.string_map(f, 7))
    if r.message(f, 14) is not None:
        r.fields(r.message(f, 14), "PodSecurityContext", set())
        spec["securityContext"] = {}
    tolerations = []
    for raw_toleration in r.values(f, 22, _BYTES):
        t = r.fields(raw_toleration, "Toleration", {1, 2, 3, 4, 5})
        toleration: Obj = {}
        for number, key in ((1, "key"), (2, "operator"), (3, "value"), (4, "effect")):
            _put(toleration, key, r.text(t, number))
        _put(toleration, "tolerationSeconds", r.integer(t, 5))
        tolerations.append(toleration)
    _put(spec, "tolerations", tolerations)
    return spec


def _container(r: _Reader, raw: memoryview) -> Obj:
    f = r.fields(raw, "Container", {1, 2, 3, 4, 5, 7, 8, 13, 14, 20})
    container: Obj = {}
    _put(container, "name", r.text(f, 1))
    _put(container, "image", r.text(f, 2))
    _put(container, "command", r.texts(f, 3))
    _put(container, "args", r.texts(f, 4))
    _put(container, "workingDir", r.text(f, 5))
    env = []
    for raw_env in r.values(f, 7, _BYTES):
        e = r.fields(raw_env, "EnvVar", {1, 2})
        var: Obj = {"name": r.text(e, 1) or ""}
        _put(var, "value", r.text(e, 2))
        env.append(var)
    _put(container, "env", env)
    resources = r.message(f, 8)
    if resources is not None:
        res = r.fields(resources, "ResourceRequirements", {1, 2})
        quantity: Callable[[memoryview], Any] = lambda q: r.text(r.fields(q, "Quantity", {1}), 1) or ""  # noqa: E731
        container["resources"] = {}
        _put(container["resources"], "limits", r.string_map(res, 1, quantity))
        _put(container["resources"], "requests", r.string_map(res, 2, quantity))
    for number, key in ((13, "terminationMessagePath"), (14, "imagePullPolicy"), (20, "terminationMessagePolicy")):
        _put(container, key, r.text(f, number))
    return container
