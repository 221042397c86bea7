"""The Modal provider's pure parts: options, the GPU catalog, offerings and regions,
capabilities, the token's sources, SandboxInfo facts to `Instance` states (real
`modal_proto` messages, as Modal's SandboxList answers), and the sandbox timeout's backstop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from modal_proto import api_pb2

from providers.base import InstanceState, Tier
from providers.egress import EgressMode
from providers.errors import Unauthorized
from providers.modal import ModalProvider, catalog, launch, status
from providers.modal.options import parse_options
from providers.modal.sdk import read_token
from providers.podspec import pod_spec_from_dict


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"colour": "red"}, "colour"),
        ({"app": "has space"}, "'app'"),
        ({"server_url": "ftp://x"}, "'server_url'"),
        ({"poll_interval": 0}, "'poll_interval'"),
        ({"poll_interval": True}, "'poll_interval'"),
        ({"regions": "us-east"}, "'regions'"),
        ({"max_lifetime": 90000}, "'max_lifetime'"),
        ({"environment": ""}, "'environment'"),
        ({"credentials_dir": 3}, "'credentials_dir'"),
        ({"create_wait": 0}, "'create_wait'"),
        ({"create_wait": 301}, "'create_wait'"),
        ({"create_wait": "15"}, "'create_wait'"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_it(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ModalProvider("modal", options)


def test_defaults_and_the_constructor_does_no_io() -> None:
    parsed = parse_options({})
    assert (parsed.app, parsed.server_url, parsed.environment) == ("nebula", "https://api.modal.com", None)
    assert parsed.create_wait == 15.0 and parse_options({"create_wait": 0.5}).create_wait == 0.5
    provider = ModalProvider("modal", {"server_url": "http://127.0.0.1:9", "credentials_dir": "/nonexistent"})
    assert provider.owner.key == "standalone.modal" and "127.0.0.1" not in repr(provider)


@pytest.mark.parametrize(
    ("accelerator", "count", "expected"),
    [(None, 0, None), ("h100", 1, "H100!"), ("a100-80gb", 2, "A100-80GB:2"), ("nvidia-a10g", 1, "A10G"),
     ("a100", 1, "A100-40GB"), ("T4", 4, "T4:4"), ("l40s", 0, "L40S"), ("h200", 8, "H200:8")],
)  # fmt: skip
def test_the_pods_accelerator_becomes_modals_gpu_string(accelerator: str | None, count: int, expected: str) -> None:
    assert catalog.gpu_string(accelerator, count) == expected


def test_an_accelerator_modal_lacks_is_named() -> None:
    with pytest.raises(ValueError, match="mi300x"):
        catalog.gpu_string("mi300x", 1)
    with pytest.raises(ValueError, match="at most 4 a10g GPUs"):
        catalog.gpu_string("a10g", 8)


def test_offerings_are_the_catalog_on_demand_with_prices() -> None:
    provider = ModalProvider("modal", {"regions": ["us-east", "eu-west"]})
    offerings = provider.offerings()
    prices = {o.accelerator: o.hourly_price for o in offerings if o.region == "us-east" and o.gpu_count <= 1}
    assert prices == {None: None, "t4": 0.59, "l4": 0.80, "a10g": 1.10, "a100-40gb": 2.10, "a100-80gb": 2.50,
                      "l40s": 1.95, "h100": 3.95, "h200": 4.55}  # fmt: skip
    h100 = {o.gpu_count: (o.hourly_price, o.instance_type) for o in offerings
            if o.accelerator == "h100" and o.region == "us-east"}  # fmt: skip
    assert h100 == {1: (3.95, "H100!"), 2: (7.9, "H100!:2"), 4: (15.8, "H100!:4"), 8: (31.6, "H100!:8")}
    assert max(o.gpu_count for o in offerings if o.accelerator == "a10g") == 4
    assert {o.tier for o in offerings} == {Tier.ON_DEMAND}
    assert provider.expand_regions(["us", "*", "eu-west", "ap"]) == ["us-east", "eu-west"]


def test_capabilities_declare_what_modal_does() -> None:
    caps = ModalProvider("modal", {}).capabilities()
    assert caps.tiers == (Tier.ON_DEMAND,) and caps.poll_interval == 10.0 and caps.log_timestamps
    assert not caps.bills_after_exit and not caps.restarts_in_place and caps.pulls_images
    assert caps.egress == frozenset(EgressMode)
    assert not caps.shapes.several_containers and not caps.shapes.init_containers and not caps.shapes.volumes


def test_the_token_comes_from_the_folder_else_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "MODAL_TOKEN_ID").write_text("ak-1\n")
    (tmp_path / "MODAL_TOKEN_SECRET").write_text("as-2\n")
    assert read_token(parse_options({"credentials_dir": str(tmp_path)})) == ("ak-1", "as-2")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-env")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-env")
    assert read_token(parse_options({})) == ("ak-env", "as-env")
    monkeypatch.delenv("MODAL_TOKEN_SECRET")
    with pytest.raises(Unauthorized, match="MODAL_TOKEN_SECRET"):
        read_token(parse_options({}))
    with pytest.raises(Unauthorized, match="credentials_dir") as caught:
        read_token(parse_options({"credentials_dir": str(tmp_path / "missing")}))
    assert "as-2" not in str(caught.value)


def _info(result_status: int = 0, exitcode: int = 0, started: float = 0.0) -> Any:
    info = api_pb2.SandboxInfo(id="sb-1", created_at=100.0, regions=["us-east"])
    info.tags.append(api_pb2.SandboxTag(tag_name=status.TAG_CLAIM, tag_value="default-w-abc"))
    info.task_info.started_at = started
    if result_status:
        info.task_info.finished_at = started + 5
        info.task_info.result.status = result_status  # type: ignore[assignment]
        info.task_info.result.exitcode = exitcode
    return info


@pytest.mark.parametrize(
    ("result_status", "exitcode", "started", "state", "code", "reason"),
    [
        (0, 0, 0.0, InstanceState.PROVISIONING, None, ""),  # queued: Modal has not started it
        (0, 0, 101.0, InstanceState.RUNNING, None, ""),
        (api_pb2.GenericResult.GENERIC_STATUS_SUCCESS, 0, 101.0, InstanceState.SUCCEEDED, 0, ""),
        (api_pb2.GenericResult.GENERIC_STATUS_FAILURE, 3, 101.0, InstanceState.FAILED, 3, ""),
        (api_pb2.GenericResult.GENERIC_STATUS_FAILURE, 137, 101.0, InstanceState.FAILED, 137, ""),
        (api_pb2.GenericResult.GENERIC_STATUS_TERMINATED, 0, 101.0, InstanceState.TERMINATED, None, ""),
        (api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT, 0, 101.0, InstanceState.FAILED, 137, "Error"),  # the backstop
        (api_pb2.GenericResult.GENERIC_STATUS_KERNEL_OOM_KILL, 0, 101.0, InstanceState.FAILED, 137, "OOMKilled"),
        (api_pb2.GenericResult.GENERIC_STATUS_INIT_FAILURE, 0, 0.0, InstanceState.FAILED, None, ""),
    ],
)
def test_sandbox_facts_become_states_with_real_exit_codes(
    result_status: int, exitcode: int, started: float, state: InstanceState, code: int | None, reason: str
) -> None:
    instance = status.instance_from(_info(result_status, exitcode, started))
    assert (instance.state, instance.exit_code, instance.exit_reason) == (state, code, reason)
    assert instance.claim == "default-w-abc" and instance.region == "us-east" and instance.id == "sb-1"


@pytest.mark.parametrize(
    ("spec", "max_lifetime", "timeout"),
    [
        ({}, 86400, 86400),  # no deadline: max_lifetime
        ({"activeDeadlineSeconds": 5}, 86400, 5 + 30 + 60),  # the grace unset: 30 s
        ({"activeDeadlineSeconds": 5, "terminationGracePeriodSeconds": 0}, 86400, 5 + 0 + 60),
        ({"activeDeadlineSeconds": 5, "terminationGracePeriodSeconds": 120}, 86400, 5 + 120 + 60),
        ({"activeDeadlineSeconds": 5, "terminationGracePeriodSeconds": 120}, 100, 100),  # at most max_lifetime
    ],
)
def test_the_sandbox_timeout_is_a_backstop_past_the_deadline_and_the_pods_grace(
    spec: dict[str, Any], max_lifetime: int, timeout: int
) -> None:
    pod = pod_spec_from_dict(
        {"metadata": {"name": "w"}, "spec": {"containers": [{"name": "main", "image": "i"}], **spec}}
    )
    assert launch.lifetime(pod, parse_options({"max_lifetime": max_lifetime})) == timeout
