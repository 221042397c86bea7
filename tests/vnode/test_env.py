"""resolve_env() and resolve_pod_env(): kubelet precedence, optional/mandatory sources, fieldRef, $(VAR), every
container resolved against its own env and resources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from vnode.sources.env import EnvError, MissingSource, PodFields, expand, format_map, resolve_env, resolve_pod_env

SECRETS = {"db": {"PASSWORD": "hunter2", "USER": "app"}}
CONFIGMAPS = {"cfg": {"MODE": "fast", "USER": "from-cm", "bad name": "x"}}


def read_secret(namespace: str, name: str) -> Mapping[str, str] | None:
    return SECRETS.get(name)


def read_configmap(namespace: str, name: str) -> Mapping[str, str] | None:
    return CONFIGMAPS.get(name)


def make_pod(env: list[dict[str, Any]] | None = None, env_from: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "env": env or [], "envFrom": env_from or []}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"}},
        "spec": {"nodeName": "nebula-local", "containers": [container]},
    }


def resolve(pod: dict[str, Any]) -> dict[str, str]:
    return resolve_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap).values


def test_env_wins_over_env_from_and_sources_apply_in_order() -> None:
    pod = make_pod(
        env=[{"name": "USER", "value": "literal"}],
        env_from=[{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "db"}, "prefix": "DB_"}],
    )
    values = resolve(pod)
    assert values["USER"] == "literal"
    assert values["DB_PASSWORD"] == "hunter2"
    assert values["MODE"] == "fast"
    assert "bad name" not in values


def test_value_from_secret_configmap_and_fields() -> None:
    pod = make_pod(
        env=[
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "PASSWORD"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODE"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "URL", "value": "http://$(POD):80/$$(POD)"},
        ]
    )
    assert resolve(pod) == {
        "PW": "hunter2",
        "MODE": "fast",
        "POD": "p",
        "NODE": "nebula-local",
        "APP": "a",
        "URL": "http://p:80/$(POD)",
    }


def test_missing_mandatory_secret_names_the_object_to_wait_for() -> None:
    pod = make_pod(env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}])
    with pytest.raises(EnvError) as caught:
        resolve(pod)
    assert caught.value.reason == "MandatorySecretNotFound"
    assert caught.value.missing == MissingSource("Secret", "ns", "later")


def test_missing_optional_sources_are_skipped_with_a_warning() -> None:
    pod = make_pod(
        env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k", "optional": True}}}],
        env_from=[{"configMapRef": {"name": "nope", "optional": True}}],
    )
    result = resolve_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert result.values == {}
    assert {w[0] for w in result.warnings} == {"OptionalSecretNotFound", "OptionalConfigMapNotFound"}


def test_unsupported_field_path_is_a_config_error() -> None:
    pod = make_pod(env=[{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])
    with pytest.raises(EnvError, match="unsupported fieldPath"):
        resolve(pod)


def test_I4_env_errors_and_reprs_never_carry_values() -> None:
    pod = make_pod(env_from=[{"secretRef": {"name": "db"}}])
    result = resolve_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert "hunter2" not in repr(result)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("$(A)", "1"), ("$(B)", "$(B)"), ("$$(A)", "$(A)"), ("a$", "a$"), ("$(A", "$(A"), ("$(A)$(A)", "11")],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def test_every_container_resolves_its_own_env_and_resources_init_containers_included() -> None:
    pod = make_pod()
    pod["spec"]["initContainers"] = [
        {"name": "fetch", "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "PASSWORD"}}}]}
    ]
    pod["spec"]["containers"] = [
        {"name": "main", "env": [{"name": "A", "value": "main-a"}, {"name": "B", "value": "$(A)/b"}]},
        {
            "name": "side",
            "resources": {"requests": {"memory": "128Mi"}},
            "env": [
                {"name": "B", "value": "$(A)/b"},  # A is main's, not this container's: left as written
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}}},
                {"name": "MAIN_CPU", "valueFrom": {"resourceFieldRef": {"containerName": "main",
                                                                       "resource": "requests.cpu"}}},
            ],
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
        },
    ]  # fmt: skip
    result = resolve_pod_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert list(result.containers) == ["fetch", "main", "side"] and result.first == "main"
    assert result.containers["fetch"] == {"PW": "hunter2"}
    assert result.containers["main"] == {"A": "main-a", "B": "main-a/b"}
    assert result.containers["side"] == {
        "MODE": "fast",
        "USER": "from-cm",
        "B": "$(A)/b",
        "MEM": "128",
        "MAIN_CPU": "0",
    }
    assert "hunter2" not in repr(result)


def test_a_warning_shared_by_several_containers_is_told_once() -> None:
    pod = make_pod(env_from=[{"configMapRef": {"name": "nope", "optional": True}}])
    pod["spec"]["containers"].append(
        {"name": "second", "envFrom": [{"configMapRef": {"name": "nope", "optional": True}}]}
    )
    result = resolve_pod_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert result.warnings == [("OptionalConfigMapNotFound", "ConfigMap ns/nope not found")]


def test_a_missing_source_of_any_container_names_the_object_to_wait_for() -> None:
    pod = make_pod()
    pod["spec"]["initContainers"] = [
        {"name": "fetch", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}]}
    ]
    with pytest.raises(EnvError) as caught:
        resolve_pod_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert caught.value.missing == MissingSource("ConfigMap", "ns", "later")


@pytest.mark.parametrize(
    ("ref", "kubelet"),
    [
        ({"secretKeyRef": {"name": "later", "key": "k"}}, 'secret "later" not found'),
        ({"configMapKeyRef": {"name": "later", "key": "k"}}, 'configmap "later" not found'),
        ({"secretKeyRef": {"name": "db", "key": "NOPE"}}, "couldn't find key NOPE in Secret ns/db"),
        ({"configMapKeyRef": {"name": "cfg", "key": "NOPE"}}, "couldn't find key NOPE in ConfigMap ns/cfg"),
    ],
)
def test_an_unresolvable_env_says_what_a_kubelet_says_of_it(ref: dict[str, Any], kubelet: str) -> None:
    with pytest.raises(EnvError) as caught:
        resolve_pod_env(
            PodFields.of(make_pod(env=[{"name": "X", "valueFrom": ref}])),
            read_secret=read_secret,
            read_configmap=read_configmap,
        )
    assert caught.value.kubelet == kubelet and caught.value.failed == {"main": kubelet}


def test_every_container_whose_env_fails_is_named_with_its_own_message() -> None:
    pod = make_pod(env_from=[{"secretRef": {"name": "gone"}}])
    pod["spec"]["initContainers"] = [
        {"name": "fetch", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}]},
        {"name": "fine", "env": [{"name": "Y", "value": "y"}]},
    ]
    with pytest.raises(EnvError) as caught:
        resolve_pod_env(PodFields.of(pod), read_secret=read_secret, read_configmap=read_configmap)
    assert caught.value.failed == {"fetch": 'configmap "later" not found', "main": 'secret "gone" not found'}
    assert list(caught.value.failed) == ["fetch", "main"]  # in the order a kubelet starts them
    assert caught.value.missing == MissingSource("ConfigMap", "ns", "later")  # the first one is waited for


@pytest.mark.parametrize(
    ("labels", "text"),
    [({}, ""), ({"b": "2", "a": "1"}, 'a="1"\nb="2"'), ({"k": 'q"\\\t\x01é'}, 'k="q\\"\\\\\\t\\x01é"')],
)
def test_labels_are_formatted_as_the_kubelet_formats_them_with_go_quoting(labels: dict[str, str], text: str) -> None:
    assert format_map(labels) == text
