"""vnode.sources.reader: a Pod's Secrets and ConfigMaps as text (env) and bytes (volumes, pull
secrets); NotFound is None, any other API failure raises."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kube.client import KubeError, NotFoundError, path_for
from vnode.sources.reader import PodReader


class Objects:
    """A Kubernetes client's `get` over a few objects; anything else is NotFound."""

    def __init__(self, **objects: dict[str, Any]) -> None:
        self.objects = objects

    def get(self, path: str) -> dict[str, Any]:
        for name, obj in self.objects.items():
            kind = "secrets" if obj.get("kind") == "Secret" else "configmaps"
            if path == path_for(kind, namespace="ns", name=name):
                return obj
        raise NotFoundError(404, "NotFound", path)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


READER = PodReader(
    Objects(  # type: ignore[arg-type]
        db={"kind": "Secret", "data": {"user": b64(b"admin"), "blob": b64(b"\xff\x00")}},
        cfg={"kind": "ConfigMap", "data": {"mode": "fast"}, "binaryData": {"bin": b64(b"\x01\x02")}},
    )
)


def test_secrets_and_configmaps_read_as_text_and_as_bytes() -> None:
    assert READER.read_secret("ns", "db") == {"user": "admin", "blob": "\ufffd\x00"}
    assert READER.read_secret_bytes("ns", "db") == {"user": b"admin", "blob": b"\xff\x00"}
    assert READER.read_configmap("ns", "cfg") == {"mode": "fast"}
    assert READER.read_configmap_bytes("ns", "cfg") == {"mode": b"fast", "bin": b"\x01\x02"}


def test_a_missing_object_is_none_for_every_reader() -> None:
    assert READER.read_secret("ns", "nope") is None
    assert READER.read_secret_bytes("ns", "nope") is None
    assert READER.read_configmap("ns", "nope") is None
    assert READER.read_configmap_bytes("ns", "nope") is None


def test_any_other_api_failure_raises() -> None:
    class Down:
        def get(self, path: str) -> dict[str, Any]:
            raise KubeError(0, "Unreachable", path)

    with pytest.raises(KubeError):
        PodReader(Down()).read_secret("ns", "db")  # type: ignore[arg-type]
