"""resolve_volumes(): the Pod's configMap, secret, downwardAPI, projected and emptyDir volumes laid
out as the kubelet's volume plugins lay them out, and a Pod waiting for its ConfigMap (FailedMount)
until it is created."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kube.client import Kube, path_for
from kube.events import EventRecorder
from kube.worker import Retry
from providers.base import ClaimName, PodSpec, ProvisionRequest, ProvisionResult
from providers.fake import FakeProvider
from providers.shape import Volume
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.handler import Handler
from vnode.runner import Runner
from vnode.sources.env import MissingSource, PodFields
from vnode.sources.volumes import InvalidVolume, MountError, resolve_volumes

SECRET_VALUE = b"s3cr3t-volume-bytes-7d1e"
SECRETS: dict[str, dict[str, bytes]] = {"db": {"password": SECRET_VALUE, "user": b"app"}}
CONFIGMAPS: dict[str, dict[str, bytes]] = {
    "cfg": {"mode": b"fast", "app.conf": b"a=1\n", "logo.png": b"\x89PNG\x00\xff"},
    "extra": {"mode": b"slow", "more": b"x"},
}


def read_secret(namespace: str, name: str) -> Mapping[str, bytes] | None:
    return SECRETS.get(name)


def read_configmap(namespace: str, name: str) -> Mapping[str, bytes] | None:
    return CONFIGMAPS.get(name)


def pod_with(*volumes: dict[str, Any], **container: Any) -> dict[str, Any]:
    main = {"name": "main", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "2"}}}
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "web", "tier": 'say "hi"'},
            "annotations": {"note": "line1\nline2"},
        },
        "spec": {
            "containers": [{**main, **container}],
            "initContainers": [{"name": "setup"}],
            "volumes": list(volumes),
        },
    }


def resolve(*volumes: dict[str, Any]) -> tuple[Volume, ...]:
    return resolve_volumes(PodFields.of(pod_with(*volumes)), read_secret=read_secret, read_configmap=read_configmap)


def files_of(volume: Volume) -> dict[str, tuple[bytes, int]]:
    return {f.path: (f.data, f.mode) for f in volume.files}


# -- layout --------------------------------------------------------------------------------
LAYOUTS: list[tuple[str, dict[str, Any], dict[str, tuple[bytes, int]]]] = [
    (
        "every data and binaryData key is a file with the default mode 0644",
        {"configMap": {"name": "cfg"}},
        {"mode": (b"fast", 0o644), "app.conf": (b"a=1\n", 0o644), "logo.png": (b"\x89PNG\x00\xff", 0o644)},
    ),
    (
        "items choose keys, their paths (subfolders too) and modes; defaultMode covers the rest",
        {
            "configMap": {
                "name": "cfg",
                "defaultMode": 0o400,
                "items": [
                    {"key": "mode", "path": "conf/mode", "mode": 0o600},
                    {"key": "app.conf", "path": "./app.conf"},
                ],
            }
        },
        {"conf/mode": (b"fast", 0o600), "app.conf": (b"a=1\n", 0o400)},
    ),  # fmt: skip
    (
        "a Secret's keys are files of its decoded bytes",
        {"secret": {"secretName": "db", "defaultMode": 0o440}},
        {"password": (SECRET_VALUE, 0o440), "user": (b"app", 0o440)},
    ),
    (
        "a missing optional ConfigMap is an empty volume",
        {"configMap": {"name": "absent", "optional": True}},
        {},
    ),
    (
        "a missing optional Secret with items is an empty volume",
        {"secret": {"secretName": "absent", "optional": True, "items": [{"key": "k", "path": "k"}]}},
        {},
    ),
    (
        "an optional source's item naming a key it lacks gives no file",
        {
            "configMap": {
                "name": "cfg",
                "optional": True,
                "items": [{"key": "nope", "path": "n"}, {"key": "mode", "path": "m"}],
            }
        },
        {"m": (b"fast", 0o644)},
    ),  # fmt: skip
    ("an emptyDir is a volume with no files", {"emptyDir": {}}, {}),
]


@pytest.mark.parametrize(("rule", "volume", "expected"), LAYOUTS, ids=[rule for rule, _, _ in LAYOUTS])
def test_configmap_and_secret_volumes_are_laid_out_as_the_kubelet_lays_them_out(
    rule: str, volume: dict[str, Any], expected: dict[str, tuple[bytes, int]]
) -> None:
    (resolved,) = resolve({"name": "v", **volume})
    assert files_of(resolved) == expected
    assert resolved.name == "v"


def test_the_volume_keeps_its_kind_and_default_mode_and_other_kinds_are_skipped() -> None:
    volumes = resolve(
        {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "emptyDir": {"medium": "Memory"}},
        {"name": "conf", "configMap": {"name": "cfg", "defaultMode": 0o755}},
    )
    assert [(v.name, v.kind, v.default_mode) for v in volumes] == [("scratch", "emptyDir", 0o644),
                                                                    ("conf", "configMap", 0o755)]  # fmt: skip


DOWNWARD: list[tuple[str, dict[str, Any], bytes]] = [
    ("metadata.name", {"fieldRef": {"fieldPath": "metadata.name"}}, b"p"),
    ("metadata.namespace", {"fieldRef": {"fieldPath": "metadata.namespace"}}, b"ns"),
    ("metadata.uid", {"fieldRef": {"fieldPath": "metadata.uid"}}, b"u-1"),
    ("labels as sorted key=%q lines", {"fieldRef": {"fieldPath": "metadata.labels"}},
     b'app="web"\ntier="say \\"hi\\""'),
    ("annotations quoted as Go quotes", {"fieldRef": {"fieldPath": "metadata.annotations"}}, b'note="line1\\nline2"'),
    ("one label, unquoted", {"fieldRef": {"fieldPath": "metadata.labels['app']"}}, b"web"),
    ("an absent label is empty", {"fieldRef": {"fieldPath": "metadata.labels['none']"}}, b""),
    ("a request in cores, rounded up", {"resourceFieldRef": {"containerName": "main", "resource": "requests.cpu"}},
     b"1"),
    ("a request with a divisor", {"resourceFieldRef": {"containerName": "main", "resource": "requests.cpu",
                                                       "divisor": "1m"}}, b"250"),
    ("memory with a divisor", {"resourceFieldRef": {"containerName": "main", "resource": "requests.memory",
                                                    "divisor": "1Mi"}}, b"64"),
    ("a limit", {"resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}}, b"2"),
    ("another container's: an init container's unset request", {"resourceFieldRef": {
        "containerName": "setup", "resource": "requests.memory"}}, b"0"),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "item", "content"), DOWNWARD, ids=[rule for rule, _, _ in DOWNWARD])
def test_downward_api_files_hold_the_field_or_resource_as_the_kubelet_formats_it(
    rule: str, item: dict[str, Any], content: bytes
) -> None:
    (volume,) = resolve({"name": "info", "downwardAPI": {"items": [{"path": "f", **item}]}})
    assert files_of(volume) == {"f": (content, 0o644)}


def test_a_projected_volume_merges_its_sources_later_ones_winning_with_one_default_mode() -> None:
    (volume,) = resolve(
        {
            "name": "all",
            "projected": {
                "defaultMode": 0o440,
                "sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "mode", "path": "mode"}]}},
                    {"configMap": {"name": "extra"}},  # its `mode` key replaces the one above
                    {"secret": {"name": "db", "items": [{"key": "password", "path": "db/pw", "mode": 0o400}]}},
                    {"secret": {"name": "absent", "optional": True}},
                    {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    {"serviceAccountToken": {"path": "token"}},  # not served: providers.shapecheck refuses it
                ],
            },
        }
    )
    assert files_of(volume) == {
        "mode": (b"slow", 0o440),
        "more": (b"x", 0o440),
        "db/pw": (SECRET_VALUE, 0o400),
        "name": (b"p", 0o440),
    }


# -- what waits, what fails ---------------------------------------------------------------
FAILURES: list[tuple[dict[str, Any], str, MissingSource | None]] = [
    ({"configMap": {"name": "later"}}, 'configmap "later" not found', MissingSource("ConfigMap", "ns", "later")),
    ({"secret": {"secretName": "later"}}, 'secret "later" not found', MissingSource("Secret", "ns", "later")),
    ({"configMap": {"name": "cfg", "items": [{"key": "nope", "path": "n"}]}},
     "configmap references non-existent config key: nope", None),
    ({"secret": {"secretName": "db", "items": [{"key": "nope", "path": "n"}]}},
     "references non-existent secret key: nope", None),
    ({"projected": {"sources": [{"configMap": {"name": "later"}}, {"secret": {"name": "gone"}}]}},
     '[configmap "later" not found, secret "gone" not found]', MissingSource("ConfigMap", "ns", "later")),
]  # fmt: skip


@pytest.mark.parametrize(("volume", "cause", "missing"), FAILURES)
def test_a_missing_mandatory_source_or_key_is_the_kubelets_failed_mount(
    volume: dict[str, Any], cause: str, missing: MissingSource | None
) -> None:
    with pytest.raises(MountError) as raised:
        resolve({"name": "v", **volume})
    assert raised.value.reason == "FailedMount"
    assert str(raised.value) == f'MountVolume.SetUp failed for volume "v" : {cause}'
    assert raised.value.missing == missing


def test_an_objects_key_that_would_escape_the_volume_fails_the_mount() -> None:
    CONFIGMAPS["escaping"] = {"..": b"x"}
    try:
        with pytest.raises(MountError, match="invalid path: must not contain '..': ..$"):
            resolve({"name": "v", "configMap": {"name": "escaping"}})
    finally:
        del CONFIGMAPS["escaping"]


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"configMap": {"name": "cfg", "items": [{"key": "mode", "path": "../up"}]}},
     "spec.volumes[0].configMap.items[0].path: Invalid value: \"../up\": must not contain '..'"),
    ({"configMap": {"name": "cfg", "items": [{"key": "mode", "path": "a/../../b"}]}},
     "spec.volumes[0].configMap.items[0].path: Invalid value: \"a/../../b\": must not contain '..'"),
    ({"secret": {"secretName": "db", "items": [{"key": "user", "path": "ok"}, {"key": "user", "path": "/etc/x"}]}},
     'spec.volumes[0].secret.items[1].path: Invalid value: "/etc/x": must be a relative path'),
    ({"secret": {"secretName": "db", "items": [{"key": "user", "path": "..hidden"}]}},
     "spec.volumes[0].secret.items[0].path: Invalid value: \"..hidden\": must not start with '..'"),
    ({"configMap": {"name": "cfg", "items": [{"key": "mode"}]}},
     "spec.volumes[0].configMap.items[0].path: Required value"),
    ({"configMap": {"name": "cfg", "items": [{"path": "p"}]}},
     "spec.volumes[0].configMap.items[0].key: Required value"),
    ({"configMap": {"items": [{"key": "mode", "path": "m"}]}}, "spec.volumes[0].configMap.name: Required value"),
    ({"secret": {}}, "spec.volumes[0].secret.secretName: Required value"),
    ({"projected": {"sources": [{"secret": {"secretName": "db"}}]}},
     "spec.volumes[0].projected.sources[0].secret.name: Required value"),
    ({"configMap": {"name": "cfg", "defaultMode": 0o1777}},
     "spec.volumes[0].configMap.defaultMode: Invalid value: 1023: must be a number between 0 and 0777 (octal), both "
     "inclusive"),
    ({"downwardAPI": {"items": [{"path": "../n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
     "spec.volumes[0].downwardAPI.items[0].path: Invalid value: \"../n\": must not contain '..'"),
    ({"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "spec.nodeName"}}]}},
     'spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: "spec.nodeName": supported values: '
     '"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"'),
    ({"downwardAPI": {"items": [{"path": "n", "resourceFieldRef": {"resource": "limits.cpu"}}]}},
     "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: Required value"),
    ({"downwardAPI": {"items": [{"path": "n", "resourceFieldRef": {"containerName": "ghost",
                                                                   "resource": "limits.cpu"}}]}},
     'spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: Not found: "ghost"'),
    ({"downwardAPI": {"items": [{"path": "n"}]}},
     "spec.volumes[0].downwardAPI.items[0]: Invalid value: exactly one of fieldRef and resourceFieldRef must be set"),
    ({"projected": {"sources": [{"configMap": {"name": "cfg", "items": [{"key": "mode", "path": "x"}]}},
                                {"secret": {"name": "db", "items": [{"key": "user", "path": "./x"}]}}]}},
     'spec.volumes[0].projected.sources[1]: Invalid value: "x": conflicting duplicate paths'),
    ({"projected": {"sources": [{"secret": {"name": "db", "items": [{"key": "user", "path": "/x"}]}}]}},
     'spec.volumes[0].projected.sources[0].secret.items[0].path: Invalid value: "/x": must be a relative path'),
]  # fmt: skip


@pytest.mark.parametrize(("volume", "message"), INVALID)
def test_a_field_the_api_server_rejects_is_refused_by_name(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidVolume) as raised:
        resolve({"name": "v", **volume})
    assert str(raised.value) == message


def test_every_volume_is_validated_before_any_object_is_read() -> None:
    """A Pod that can never run is refused at once, not after waiting for its ConfigMap."""
    reads: list[str] = []

    def counting(namespace: str, name: str) -> Mapping[str, bytes] | None:
        reads.append(name)
        return None

    pod = pod_with(
        {"name": "first", "configMap": {"name": "later"}},
        {"name": "bad", "secret": {"secretName": "db", "items": [{"key": "user", "path": "../x"}]}},
    )
    with pytest.raises(InvalidVolume, match=r"spec\.volumes\[1\]\.secret"):
        resolve_volumes(PodFields.of(pod), read_secret=counting, read_configmap=counting)
    assert reads == []


def test_a_source_that_cannot_be_read_fails_the_mount_naming_only_the_object() -> None:
    def broken(namespace: str, name: str) -> Mapping[str, bytes] | None:
        raise ConnectionError(f"boom {SECRET_VALUE!r}")

    with pytest.raises(MountError) as raised:
        resolve_volumes(PodFields.of(pod_with({"name": "v", "secret": {"secretName": "db"}})), read_secret=broken,
                        read_configmap=broken)  # fmt: skip
    assert str(raised.value) == 'MountVolume.SetUp failed for volume "v" : could not read secret "db": ConnectionError'
    assert raised.value.missing is None


def test_I4_volume_errors_and_reprs_never_carry_contents() -> None:
    volumes = resolve({"name": "creds", "secret": {"secretName": "db"}})
    text = repr(volumes) + repr(ProvisionRequest(claim=ClaimName("c"), volumes=volumes))
    assert "password" in text and SECRET_VALUE.decode() not in text
    with pytest.raises(MountError) as raised:
        resolve({"name": "creds", "secret": {"secretName": "db", "items": [{"key": "missing", "path": "m"}]}})
    assert SECRET_VALUE.decode() not in str(raised.value) + repr(raised.value)


# -- through the vnode ------------------------------------------------------------------------
class RecordingFake(FakeProvider):
    """The fake provider, keeping every ProvisionRequest it was given (the fake's own call log
    keeps a summary line only)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[ProvisionRequest] = []
        self._lock = threading.Lock()

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        with self._lock:
            self.requests.append(request)
        return super().provision(pod, request)


def events_for(kube: Kube, name: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    return items


def test_a_pod_waits_in_failed_mount_until_its_configmap_is_created_then_carries_its_files(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = RecordingFake("gpu", {"cloud": cloud_name})
    start_runner(provider)
    volumes = [
        {"name": "conf", "configMap": {"name": "late-config", "items": [{"key": "model", "path": "model.txt"}]}},
        {"name": "whole", "configMap": {"name": "late-config", "defaultMode": 0o400}},
    ]
    kube.create(path_for("pods", namespace="default"), make_pod("mounter", "gpu", volumes=volumes))
    message = 'MountVolume.SetUp failed for volume "conf" : configmap "late-config" not found'
    wait_for(lambda: any(e["reason"] == "FailedMount" and e["message"] == message for e in events_for(kube, "mounter")))
    assert provider.requests == [] and provider.list() == []

    def waiting() -> dict[str, Any]:  # the status a kubelet writes before it mounts: kubectl's ContainerCreating
        return dict((((get_pod(kube, "mounter") or {}).get("status") or {}).get("containerStatuses") or [{}])[0])

    wait_for(lambda: waiting().get("state") == {"waiting": {"reason": "ContainerCreating"}}, what="ContainerCreating")
    assert phase_of(kube, "mounter") == "Pending" and waiting()["ready"] is False
    blob = base64.b64encode(b"\x00\x01").decode()
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late-config"},
                 "data": {"model": "llama"}, "binaryData": {"blob": blob}}  # fmt: skip
    kube.create(path_for("configmaps", namespace="default"), configmap)
    wait_for(lambda: phase_of(kube, "mounter") == "Running", timeout=10)
    (request,) = provider.requests
    conf, whole = request.volumes
    assert (conf.name, conf.kind, files_of(conf)) == ("conf", "configMap", {"model.txt": (b"llama", 0o644)})
    assert files_of(whole) == {"model": (b"llama", 0o400), "blob": (b"\x00\x01", 0o400)}


def test_I4_a_secret_volume_reaches_the_provider_and_no_log_event_or_status(
    kube: Kube, cloud_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    value = "vol-s3cr3t-41aa"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vol-creds"}, "stringData": {"key": value}}
    kube.create(path_for("secrets", namespace="default"), secret)
    provider = RecordingFake("gpu", {"cloud": cloud_name})
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))
    volumes = [
        {"name": "creds", "secret": {"secretName": "vol-creds"}},
        {"name": "lacking", "secret": {"secretName": "vol-creds", "items": [{"key": "absent", "path": "a"}]}},
    ]
    pod = kube.create(path_for("pods", namespace="default"), make_pod("vol-keeper", "gpu", volumes=volumes))
    with pytest.raises(Retry) as raised:
        handler.provisioner.create_pod(pod)  # the second volume names a key the Secret lacks: FailedMount
    assert "references non-existent secret key: absent" in str(raised.value)
    pod["spec"]["volumes"] = volumes[:1]
    handler.provisioner.create_pod(pod)
    handler.flush("default/vol-keeper", pod)
    (request,) = provider.requests
    assert [f.data for f in request.volumes[0].files] == [value.encode()]
    # The recorder writes on its own thread: wait for the first and the last Event told.
    wait_for(lambda: {"FailedMount", "Provisioned"} <= {e["reason"] for e in events_for(kube, "vol-keeper")})
    events = [f"{e['reason']} {e['message']}" for e in events_for(kube, "vol-keeper")]
    written = "\n".join([caplog.text, *events, repr(get_pod(kube, "vol-keeper")), repr(request), repr(raised.value)])
    assert value not in written


def test_the_provision_request_carries_every_containers_env_the_first_app_containers_as_env_and_the_volumes(
    kube: Kube, cloud_name: str
) -> None:
    provider = RecordingFake("gpu", {"cloud": cloud_name})
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))
    spec = {
        "initContainers": [{"name": "fetch", "image": "busybox", "env": [{"name": "STEP", "value": "fetch"}]}],
        "containers": [
            {"name": "main", "image": "busybox", "env": [{"name": "STEP", "value": "serve"}]},
            {"name": "metrics", "image": "busybox", "env": [
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
        ],
        "volumes": [{"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {
            "fieldPath": "metadata.name"}}]}}, {"name": "scratch", "emptyDir": {}}],
    }  # fmt: skip
    pod = kube.create(path_for("pods", namespace="default"), make_pod("several", "gpu", spec=spec))
    handler.provisioner.create_pod(pod)
    (request,) = provider.requests
    assert dict(request.container_env) == {"fetch": {"STEP": "fetch"}, "main": {"STEP": "serve"},
                                           "metrics": {"POD": "several"}}  # fmt: skip
    assert dict(request.env) == {"STEP": "serve"} and dict(request.env_for("metrics")) == {"POD": "several"}
    assert [(v.name, files_of(v)) for v in request.volumes] == [("info", {"name": (b"several", 0o644)}),
                                                                ("scratch", {})]  # fmt: skip


def test_a_pod_with_a_volume_path_the_api_server_rejects_fails_naming_the_field(kube: Kube, cloud_name: str) -> None:
    provider = RecordingFake("gpu", {"cloud": cloud_name})
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))
    volume = {"name": "conf", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "../../etc/passwd"}]}}
    pod = kube.create(path_for("pods", namespace="default"), make_pod("escaper", "gpu", volumes=[volume]))
    handler.provisioner.create_pod(pod)
    handler.flush("default/escaper", pod)
    status = (get_pod(kube, "escaper") or {}).get("status") or {}
    assert status.get("phase") == "Failed" and status.get("reason") == "ConfigError"
    assert status.get("message", "").startswith("spec.volumes[0].configMap.items[0].path: Invalid value")
    assert provider.requests == []
