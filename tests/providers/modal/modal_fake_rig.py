"""The Modal fake as tests use it: a running `FakeModal`, and a real `modal.Client` for it (V1
sandboxes: `MODAL_SANDBOX_V2=0`, since the fake serves no V2 RPCs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from providers.modal.fake import FakeModal, start_fake_modal


def fake_modal(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModal]:
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    with start_fake_modal(token_id="ak-test", token_secret="as-test-secret") as fake:
        yield fake


def open_client(url: str, token_id: str, token_secret: str) -> Any:
    import modal
    from modal_proto import api_pb2

    client: Any = modal.Client(url, api_pb2.CLIENT_TYPE_CLIENT, (token_id, token_secret))
    client.__enter__()
    return client


def client_for(fake: FakeModal) -> Iterator[Any]:
    client = open_client(fake.url, fake.token_id, fake.token_secret)
    try:
        yield client
    finally:
        client.close()


def app_for(client: Any, name: str = "nebula") -> Any:
    import modal

    return modal.App.lookup(name, create_if_missing=True, client=client, environment_name="main")
