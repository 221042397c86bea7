"""The NODE_DNS_NAME setting and `runvnode --node-dns-name`: a DNS name (RFC 1123 subdomain),
checked by `nebula.E011` before start-up and refused by the command when malformed."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management.base import CommandError
from django.test import override_settings

from nebula_site import config
from nebula_site.checks import check_nebula_settings
from nebula_site.management.commands.runvnode import node_dns_name_from


def ids(conf: dict[str, Any]) -> list[str]:
    with override_settings(NEBULA=conf):
        return [m.id or "" for m in check_nebula_settings()]


@pytest.mark.parametrize("name", ["nebula-kubelet.nebula.svc", "kubelet", "a.b-c.example.com"])
def test_a_dns_name_passes_the_check(name: str) -> None:
    assert ids({**config.load({}), "NODE_DNS_NAME": name}) == []


@pytest.mark.parametrize("name", ["Kubelet.Example.com", "-kubelet", "a..b", "kubelet_1", "10.0.0.7", "x" * 64])
def test_anything_else_is_nebula_e011(name: str) -> None:
    assert ids({**config.load({}), "NODE_DNS_NAME": name}) == ["nebula.E011"]


def test_the_environment_sets_the_dns_name() -> None:
    assert config.load({"NEBULA_NODE_DNS_NAME": "kubelet.nebula.svc"})["NODE_DNS_NAME"] == "kubelet.nebula.svc"


def test_the_flag_wins_over_the_setting_and_nothing_means_none() -> None:
    with override_settings(NEBULA={**config.load({}), "NODE_DNS_NAME": "from-settings.svc"}):
        assert node_dns_name_from("from-flag.svc") == "from-flag.svc"
        assert node_dns_name_from(None) == "from-settings.svc"
    with override_settings(NEBULA=config.load({})):
        assert node_dns_name_from(None) is None


def test_the_flag_refuses_what_is_not_a_dns_name() -> None:
    with override_settings(NEBULA=config.load({})), pytest.raises(CommandError, match="is not a DNS name"):
        node_dns_name_from("not_a_name")
