"""The protobuf envelope decoder: captured kubectl bytes, hand-built messages, malformed input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster import protobuf


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _entry(number: int, key: str, value: bytes | str) -> bytes:
    return _bytes(number, _bytes(1, key) + _bytes(2, value))


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return (
        b"k8s\x00"
        + _bytes(1, _bytes(1, api_version) + _bytes(2, kind))
        + _bytes(2, raw)
        + _bytes(3, "")
        + _bytes(4, "")
    )


# kubectl 1.37 `create secret generic s1 --from-literal=k=v`, as captured (kubectl-needs.md section 11).
CAPTURED_SECRET = bytes.fromhex(
    "6b387300"  # k8s\0
    "0a0c0a0276311206536563726574"  # typeMeta {apiVersion "v1", kind "Secret"}
    "121e0a120a02733112001a0022002a00320038004200"  # raw {metadata {name "s1", empty fields...}
    "12060a016b1201761a00"  # ... data {"k": "v"}, type ""}
    "1a002200"  # contentEncoding "", contentType ""
)


def test_captured_kubectl_secret_decodes_like_its_json_form() -> None:
    assert protobuf.decode_object(CAPTURED_SECRET) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s1"},
        "data": {"k": "dg=="},
    }


_META = (
    _bytes(1, "c1")
    + _bytes(2, "gen-")
    + _bytes(3, "team-a")
    + _int(7, 3)
    + _bytes(8, _int(1, 1_700_000_000))
    + _entry(11, "app", "demo")
    + _entry(11, "tier", "")
    + _entry(12, "note", "ünïcode")
    + _bytes(13, _bytes(1, "Pod") + _bytes(3, "p1") + _bytes(4, "uid-1") + _bytes(5, "v1") + _int(6, 1))
    + _bytes(14, "nebula.io/cleanup")
    + _int(10, 0)
)


@pytest.mark.parametrize(
    ("api_version", "kind", "raw", "expected"),
    [
        pytest.param(
            "v1",
            "Secret",
            _bytes(1, _bytes(1, "s2"))
            + _entry(2, "bin", b"\x00\xff")
            + _bytes(3, "kubernetes.io/tls")
            + _entry(4, "plain", "text")
            + _int(5, 1),
            {
                "metadata": {"name": "s2"},
                "data": {"bin": "AP8="},
                "type": "kubernetes.io/tls",
                "stringData": {"plain": "text"},
                "immutable": True,
            },
            id="secret-all-fields",
        ),
        pytest.param(
            "v1",
            "ConfigMap",
            _bytes(1, _META) + _entry(2, "a", "b") + _entry(3, "blob", b"\x01\x02") + _int(4, 0),
            {
                "metadata": {
                    "name": "c1",
                    "generateName": "gen-",
                    "namespace": "team-a",
                    "generation": 3,
                    "creationTimestamp": "2023-11-14T22:13:20Z",
                    "deletionGracePeriodSeconds": 0,
                    "labels": {"app": "demo", "tier": ""},
                    "annotations": {"note": "ünïcode"},
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "uid-1", "controller": True}
                    ],
                    "finalizers": ["nebula.io/cleanup"],
                },
                "data": {"a": "b"},
                "binaryData": {"blob": "AQI="},
                "immutable": False,
            },
            id="configmap-with-full-metadata",
        ),
        pytest.param(
            "v1",
            "Namespace",
            _bytes(1, _bytes(1, "ns1") + _bytes(8, b"")) + _bytes(2, _bytes(1, "kubernetes")) + _bytes(3, b""),
            {"metadata": {"name": "ns1"}, "spec": {"finalizers": ["kubernetes"]}, "status": {}},
            id="namespace",
        ),
        pytest.param(
            "v1",
            "Namespace",
            _bytes(1, _bytes(1, "ns2"))
            + _bytes(3, _bytes(1, "Terminating") + _bytes(2, _bytes(1, "X") + _bytes(2, "True"))),
            {
                "metadata": {"name": "ns2"},
                "spec": {},
                "status": {"phase": "Terminating", "conditions": [{"type": "X", "status": "True"}]},
            },
            id="namespace-status",
        ),
        pytest.param(
            "v1",
            "ServiceAccount",
            _bytes(1, _bytes(1, "sa1") + _bytes(3, "default")) + _bytes(3, _bytes(1, "pull")) + _int(4, 0),
            {
                "metadata": {"name": "sa1", "namespace": "default"},
                "imagePullSecrets": [{"name": "pull"}],
                "automountServiceAccountToken": False,
            },
            id="serviceaccount",
        ),
        pytest.param(
            "v1",
            "Secret",
            _bytes(1, _bytes(1, "s3") + _bytes(99, "future field") + _int(98, 7)) + _bytes(77, b"\x00\x01"),
            {"metadata": {"name": "s3"}},
            id="unknown-fields-skipped",
        ),
        pytest.param("v1", "ConfigMap", b"", {"metadata": {}}, id="empty-object"),
    ],
)
def test_hand_built_objects_decode_to_their_json_form(
    api_version: str, kind: str, raw: bytes, expected: dict[str, Any]
) -> None:
    assert protobuf.decode_object(_envelope(api_version, kind, raw)) == {
        "apiVersion": api_version,
        "kind": kind,
        **expected,
    }


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (_envelope("apps/v1", "Deployment", b""), "apps/v1/Deployment is not supported, send JSON"),
        (_envelope("authorization.k8s.io/v1", "SelfSubjectRulesReview", b""), "not supported, send JSON"),
        (b"k8s\x00", "not supported, send JSON"),
        (b'{"kind":"Secret"}', "k8s"),
        (b"", "k8s"),
        (b"k8s\x00\x0a", "truncated varint"),
        (b"k8s\x00\x0a\x05ab", "claims 5 bytes"),
        (b"k8s\x00\x0a" + _varint(1 << 40) + b"x", "claims"),
        (b"k8s\x00\x0b", "wire type 3"),
        (b"k8s\x00\x08\x01", "wire type"),
        (b"k8s\x00\x00\x00", "field number 0"),
        (b"k8s\x00\x10" + b"\xff" * 11, "varint"),
        (b"k8s\x00\x0d\x01\x02", "truncated fixed"),
        (_envelope("v1", "Secret", _bytes(1, _bytes(1, b"\xff\xfe"))), "UTF-8"),
        (_envelope("v1", "Secret", _int(1, 5)), "wire type"),
        (_envelope("v1", "Secret", _bytes(2, b"\x0a\x09ab")), "claims 9 bytes"),
        (_envelope("v1", "Secret", b"") + _bytes(3, "gzip"), "content encoding"),
    ],
)
def test_malformed_or_unsupported_bodies_raise_protobuf_error(body: bytes, match: str) -> None:
    with pytest.raises(protobuf.ProtobufError, match=match):
        protobuf.decode_object(body)


def test_protobuf_error_is_a_value_error() -> None:
    assert issubclass(protobuf.ProtobufError, ValueError)


def _decode_or_error(body: bytes) -> None:
    try:
        result = protobuf.decode_object(body)
    except protobuf.ProtobufError:
        return
    assert isinstance(result, dict) and "metadata" in result


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_only_ever_raise_protobuf_error(body: bytes) -> None:
    _decode_or_error(body)
    _decode_or_error(b"k8s\x00" + body)


@given(st.sampled_from(["Secret", "ConfigMap", "Namespace", "ServiceAccount"]), st.binary(max_size=300))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_objects_in_a_valid_envelope_only_ever_raise_protobuf_error(kind: str, raw: bytes) -> None:
    _decode_or_error(_envelope("v1", kind, raw))


_field = st.one_of(
    st.tuples(st.integers(1, 20), st.binary(max_size=20)).map(lambda t: _bytes(*t)),
    st.tuples(st.integers(1, 20), st.integers(0, (1 << 64) - 1)).map(lambda t: _int(*t)),
)


@given(
    st.sampled_from(["Secret", "ConfigMap", "Namespace"]), st.lists(_field, max_size=8), st.lists(_field, max_size=8)
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_structurally_valid_random_fields_only_ever_raise_protobuf_error(
    kind: str, meta: list[bytes], rest: list[bytes]
) -> None:
    _decode_or_error(_envelope("v1", kind, _bytes(1, b"".join(meta)) + b"".join(rest)))
