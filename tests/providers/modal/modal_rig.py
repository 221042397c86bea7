"""Shared pieces of the Modal provider's tests: the fake Modal server (`providers.modal.fake`,
reached only through the real SDK), providers built on it, Pods."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from providers.base import PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.modal import ModalProvider
from providers.modal.fake import start_fake_modal
from providers.owner import Owner


@pytest.fixture
def fake_modal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A running fake Modal API (it serves V1 sandboxes: MODAL_SANDBOX_V2=0, as the deploy
    component sets it); every sandbox is killed after the test."""
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    fake = start_fake_modal()
    try:
        yield fake
    finally:
        fake.close()


def provider_on(fake: Any, tmp_path: Any, *, cluster: str = "standalone", alias: str = "modal",
                **options: Any) -> ModalProvider:  # fmt: skip
    """A provider on `fake`, its token in a credentials folder as a mounted Secret gives it."""
    folder = tmp_path / f"creds-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "MODAL_TOKEN_ID").write_text(fake.token_id)
    (folder / "MODAL_TOKEN_SECRET").write_text(fake.token_secret)
    merged = {"server_url": fake.url, "credentials_dir": str(folder), "log_poll_interval": 0.1, **options}
    return ModalProvider(alias, merged, owner=Owner(cluster, alias))


def make_pod(name: str = "worker", **overrides: Any) -> PodSpec:
    values: dict[str, Any] = {
        "namespace": "default", "name": name, "uid": str(uuid.uuid4()), "container": "main",
        "image": "python:3.11-slim", "command": ("sh", "-c", "sleep 60"),
    }  # fmt: skip
    values.update(overrides)
    return PodSpec(**values)


def request_for(pod: PodSpec, **fields: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), **fields)
