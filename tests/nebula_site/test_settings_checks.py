"""The NEBULA settings: environment overrides, and system checks with stable ids."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from kube.operations import OperationLimits
from nebula_site import config
from nebula_site.checks import check_nebula_settings

ROOT = Path(__file__).resolve().parents[2]


def ids(conf: dict[str, Any]) -> list[str]:
    with override_settings(NEBULA=conf):
        return [m.id or "" for m in check_nebula_settings()]


def test_defaults_pass_every_check() -> None:
    assert ids(config.load({})) == []


def test_environment_overrides_keep_the_default_types() -> None:
    conf = config.load({"NEBULA_POLL_INTERVAL": "2.5", "NEBULA_KUBELET_ADDR": "0.0.0.0:11250"})
    assert conf["POLL_INTERVAL"] == 2.5
    assert conf["KUBELET_ADDR"] == "0.0.0.0:11250"


def test_provider_overrides_are_merged_with_the_builtin_ones() -> None:
    conf = config.load({"NEBULA_PROVIDERS": '{"gpu-a": {"BACKEND": "providers.fake.FakeProvider"}}'})
    assert set(conf["PROVIDERS"]) == {"local", "fake", "gpu-a"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"ENABLED_PROVIDERS": ["nope"]}, "nebula.E001"),
        ({"PROVIDERS": {"x": {"BACKEND": "no.such.Backend"}}}, "nebula.E002"),
        ({"KUBELET_ADDR": "10250"}, "nebula.E003"),
        ({"CONSOLE_ADDR": "host:99999"}, "nebula.E003"),
        ({"METRICS_ADDR": "9090"}, "nebula.E003"),
        ({"NODE_IP": "not-an-ip"}, "nebula.E003"),
        ({"POLL_INTERVAL": 0}, "nebula.E004"),
        ({"PROVIDERS": {"x": {"OPTIONS": {}}}}, "nebula.E005"),
        ({"LOG_FORMAT": "xml"}, "nebula.E007"),
        ({"OUTAGE_TOLERATION_SECONDS": -1}, "nebula.E008"),
        ({"OUTAGE_TOLERATION_SECONDS": "soon"}, "nebula.E008"),
        ({"OUTAGE_TOLERATION_SECONDS": True}, "nebula.E008"),
        ({"CLUSTER_NAME": "Prod.1"}, "nebula.E009"),
        ({"RESTART_BACKOFF_INITIAL": 0}, "nebula.E010"),
        ({"RESTART_BACKOFF_INITIAL": 400.0}, "nebula.E010"),
        ({"SPEND_INTERVAL": 0.5}, "nebula.E020"),
        ({"SPEND_INTERVAL": True}, "nebula.E020"),
        ({"RESTART_BACKOFF_RESET": "soon"}, "nebula.E010"),
        ({"LISTENER_LIMITS": {"per_host": 8}}, "nebula.E017"),
        ({"LISTENER_LIMITS": {"head_timeout": "soon"}}, "nebula.E017"),
        ({"LISTENER_LIMITS": ["per_client"]}, "nebula.E017"),
        ({"PROVIDER_OPERATIONS": {"concurrency": 0}}, "nebula.E018"),
        ({"PROVIDER_OPERATIONS": {"parallel": 4}}, "nebula.E018"),
        ({"PROVIDER_OPERATIONS": [8]}, "nebula.E018"),
        ({"PROVIDERS": {"x": {"BACKEND": "providers.fake.FakeProvider", "OPERATIONS": {"rate": -1}}}}, "nebula.E018"),
        ({"SHARE_PROVIDERS": "yes"}, "nebula.E019"),
        ({"EPHEMERAL_OUTPUT_BUDGET": 1024}, "nebula.E021"),
        ({"EPHEMERAL_OUTPUT_BUDGET": "64Mi"}, "nebula.E021"),
        ({"EPHEMERAL_OUTPUT_BUDGET": 2 * 1024**3}, "nebula.E021"),
    ],
)
def test_each_bad_setting_has_its_stable_id(overrides: dict[str, Any], expected: str) -> None:
    conf = config.load({})
    conf.update(overrides)
    assert expected in ids(conf)


def test_provider_operations_layer_a_providers_own_over_the_shared_over_the_defaults() -> None:
    conf = config.load({"NEBULA_PROVIDER_OPERATIONS": '{"concurrency": 20, "rate": 5}'})
    conf["PROVIDERS"]["fake"] = {**conf["PROVIDERS"]["fake"], "OPERATIONS": {"rate": 1.5}}
    assert ids(conf) == []
    limits = config.operation_limits(conf, ["local", "fake"])
    assert limits["local"] == OperationLimits(concurrency=20, rate=5, burst=100)
    assert limits["fake"] == OperationLimits(concurrency=20, rate=1.5, burst=100)
    assert config.operation_limits(config.load({}), ["local"]) == {"local": OperationLimits()}


def test_a_bad_providers_operations_are_named_with_its_alias() -> None:
    conf = config.load({})
    conf["PROVIDERS"]["fake"] = {**conf["PROVIDERS"]["fake"], "OPERATIONS": {"burst": 0}}
    with pytest.raises(ValueError, match=re.escape("NEBULA['PROVIDERS']['fake']['OPERATIONS']: burst=0 must be")):
        config.operation_limits(conf, ["fake"])


def test_the_metrics_listener_is_loopback_by_default_and_an_empty_address_turns_it_off() -> None:
    assert config.load({})["METRICS_ADDR"] == "127.0.0.1:9090"
    conf = config.load({"NEBULA_METRICS_ADDR": ""})
    assert conf["METRICS_ADDR"] == "" and "nebula.E003" not in ids(conf)


def test_malformed_environment_override_is_reported_not_raised() -> None:
    conf = config.load({"NEBULA_POLL_INTERVAL": "soon"})
    assert "nebula.E006" in ids(conf)
    assert conf["_ERRORS"] == ["NEBULA_POLL_INTERVAL='soon' is not a number"]
    assert config.load({"NEBULA_PROBE_WORKERS": "2.5"})["_ERRORS"] == [
        "NEBULA_PROBE_WORKERS='2.5' is not a whole number"
    ]
    assert "nebula.E006" in ids(config.load({"NEBULA_OUTAGE_TOLERATION_SECONDS": "forever-ish"}))


def test_the_outage_toleration_is_forever_by_default_and_whole_seconds_from_the_environment() -> None:
    assert config.load({})["OUTAGE_TOLERATION_SECONDS"] is None
    assert config.load({"NEBULA_OUTAGE_TOLERATION_SECONDS": "600"})["OUTAGE_TOLERATION_SECONDS"] == 600
    assert config.load({"NEBULA_OUTAGE_TOLERATION_SECONDS": "None"})["OUTAGE_TOLERATION_SECONDS"] is None
    assert not ids(config.load({"NEBULA_OUTAGE_TOLERATION_SECONDS": "0"}))


@pytest.mark.parametrize("addr", [":10250", "127.0.0.1:0", "[::1]:8000", "node-1.example:443"])
def test_good_addresses_parse(addr: str) -> None:
    config.parse_address(addr)


@pytest.mark.parametrize(
    ("addr", "message"),
    [
        ("localhost", "is not host:port"),
        ("host:port", "port must be a number"),
        ("[zz]:80", "'zz' in brackets is not an IPv6 address"),
        ("bad_host!:80", "neither an IP address nor a host name"),
    ],
)
def test_bad_addresses_say_what_is_wrong(addr: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        config.parse_address(addr)


def test_manage_py_check_fails_with_the_check_id_on_a_bad_environment() -> None:
    env = {**os.environ, "NEBULA_KUBELET_ADDR": "nowhere"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "nebula.E003" in result.stderr


def test_a_malformed_json_override_names_the_variable_but_never_echoes_its_value() -> None:
    raw = '{"aws": {"OPTIONS": {"secret_access_key": "wJalrXUtnFEMI"}'  # one brace short
    errors = config.load({"NEBULA_PROVIDERS": raw})["_ERRORS"]
    assert len(errors) == 1 and errors[0].startswith("NEBULA_PROVIDERS is not valid JSON")
    assert "wJalrXUtnFEMI" not in errors[0]
    assert config.load({"NEBULA_ENABLED_PROVIDERS": '{"a": 1}'})["_ERRORS"] == [
        "NEBULA_ENABLED_PROVIDERS must be a JSON array"
    ]


def test_a_bad_log_level_logs_at_info_and_is_a_check_error() -> None:
    errors: list[str] = []
    assert config.log_level("debug", errors) == "DEBUG" and errors == []
    assert config.log_level("loud", errors) == "INFO"
    assert errors == ["NEBULA_LOG_LEVEL='loud' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"]
    env = {**os.environ, "NEBULA_LOG_LEVEL": "loud"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "nebula.E006" in result.stderr and "NEBULA_LOG_LEVEL='loud'" in result.stderr
