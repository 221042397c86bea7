"""Content negotiation of the API: a request body's media type and decoding (JSON, YAML,
protobuf), and whether the client's Accept asks for a server-side Table.

`api.Api` calls these once per request. Pure functions of header values and bytes; errors
are `ApiError`s (400 for a malformed body, 415 for a media type the server does not read).
Tests: tests/devcluster/test_protobuf.py, tests/devcluster/test_tables.py.
"""

from __future__ import annotations

from typing import Any

from devcluster import protobuf
from devcluster.errors import ApiError
from devcluster.resources import load_json, load_yaml

PROTOBUF = "application/vnd.kubernetes.protobuf"


def media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def decode_body(content_type: str, body: bytes) -> Any:
    """Decode a JSON, YAML or protobuf request body; 400 on malformed input, 415 on unknown types."""
    media = media_type(content_type) or "application/json"
    if media == PROTOBUF:
        try:
            return protobuf.decode_object(body)
        except protobuf.ProtobufError as err:
            raise ApiError(415, f"the body of the request was in an unknown format: {err}") from None
    if media in ("application/json", "*/*"):
        return load_json(body or b"null")
    if media in ("application/yaml", "application/x-yaml"):
        return load_yaml(body)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json, application/yaml, {PROTOBUF}",
    )


def table_policy(accept: str, include_object: str) -> str | None:
    """The includeObject policy when `accept` asks for a meta.k8s.io Table, else None."""
    for option in accept.split(","):
        params = {p.strip() for p in option.split(";")[1:]}
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return include_object or "Metadata"
    return None
