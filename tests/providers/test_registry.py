"""The registry builds providers by alias and import path, and refuses bad entries clearly."""

from __future__ import annotations

import pytest

from providers import registry
from providers.owner import Owner


def test_unknown_alias_names_the_known_ones() -> None:
    with pytest.raises(registry.ConfigurationError, match=r"unknown provider alias 'gpu' \(known: local\)"):
        registry.build_providers({"local": {"BACKEND": "providers.local.LocalProvider"}}, ["gpu"], cluster="c1")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"BACKEND": "no.such.module.Provider"}, "cannot be imported"),
        ({"BACKEND": "providers.base.NoSuchClass"}, "has no class 'NoSuchClass'"),
        ({"BACKEND": "Provider"}, "not a dotted path"),
    ],
)
def test_unimportable_backend_is_a_backend_import_error(entry: dict[str, str], message: str) -> None:
    with pytest.raises(registry.BackendImportError, match=message):
        registry.validate_entry("x", entry)


@pytest.mark.parametrize(
    ("alias", "entry"),
    [
        ("Bad_Alias", {"BACKEND": "providers.local.LocalProvider"}),
        ("ok", {"OPTIONS": {}}),
        ("ok", {"BACKEND": "providers.local.LocalProvider", "OPTIONS": ["not", "a", "mapping"]}),
    ],
)
def test_malformed_entries_are_configuration_errors(alias: str, entry: dict[str, object]) -> None:
    with pytest.raises(registry.ConfigurationError):
        registry.validate_entry(alias, entry)


def test_provider_is_built_with_its_alias_as_name(tmp_path: object) -> None:
    built = registry.build_providers(
        {"my-local": {"BACKEND": "providers.local.LocalProvider", "OPTIONS": {"state_dir": str(tmp_path)}}},
        ["my-local"],
        cluster="prod-1",
    )
    assert built["my-local"].name == "my-local"
    assert built["my-local"].owner == Owner("prod-1", "my-local")
    assert built["my-local"].owner.key == "prod-1.my-local"


def test_a_cluster_name_that_is_not_a_dns_label_is_a_configuration_error(tmp_path: object) -> None:
    entry = {"BACKEND": "providers.local.LocalProvider", "OPTIONS": {"state_dir": str(tmp_path)}}
    with pytest.raises(registry.ConfigurationError, match="cluster name 'Prod.1' must be a DNS label"):
        registry.build_provider("my-local", entry, cluster="Prod.1")


def test_bad_options_become_a_configuration_error(tmp_path: object) -> None:
    with pytest.raises(registry.ConfigurationError, match="my-local"):
        registry.build_provider(
            "my-local", {"BACKEND": "providers.local.LocalProvider", "OPTIONS": {"no_such_option": 1}}, cluster="c1"
        )
