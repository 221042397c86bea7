"""The Modal fake records a sandbox's network policy as SDK 1.6.4 sends it (`network_access`:
BLOCKED, or ALLOWLIST with CIDRs and domains; OPEN by default), driven by the real SDK."""

from __future__ import annotations

from typing import Any

import modal

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for


def _policy(fake: FakeModal, sandbox_id: str) -> tuple[bool, list[str], list[str]]:
    (record,) = [r for r in fake.sandboxes() if r["id"] == sandbox_id]
    return record["block_network"], record["allowed_cidrs"], record["allowed_domains"]


def test_open_by_default(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("true", app=app_for(client), client=client)
    assert _policy(fake, sb.object_id) == (False, [], [])


def test_block_network_is_recorded_as_blocked(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("true", app=app_for(client), client=client, block_network=True)
    assert _policy(fake, sb.object_id) == (True, [], [])


def test_allowlists_are_recorded(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create(
        "true", app=app_for(client), client=client,
        outbound_cidr_allowlist=["10.0.0.0/8", "192.0.2.1/32"], outbound_domain_allowlist=["pypi.org", "*.example.com"],
    )  # fmt: skip
    assert _policy(fake, sb.object_id) == (False, ["10.0.0.0/8", "192.0.2.1/32"], ["pypi.org", "*.example.com"])


def test_cidr_allowlist_alone(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("true", app=app_for(client), client=client, outbound_cidr_allowlist=["10.1.0.0/16"])
    assert _policy(fake, sb.object_id) == (False, ["10.1.0.0/16"], [])
