"""Registry hosts as the container runtimes name them (`providers.pullauth`): the registry of
an image reference, docker config keys normalised, Docker Hub's names as one; the password
never in a repr (I4)."""

from __future__ import annotations

import pytest

from providers.pullauth import RegistryAuth, auth_for, normalise_host, registry_of


@pytest.mark.parametrize(
    ("image", "registry"),
    [("busybox:1.36", "docker.io"), ("library/busybox", "docker.io"), ("acme/trainer:1", "docker.io"),
     ("ghcr.io/acme/trainer:1", "ghcr.io"), ("localhost/x", "localhost"), ("registry:5000/x", "registry:5000"),
     ("index.docker.io/library/busybox", "docker.io"), ("Quay.IO/a/b@sha256:00", "quay.io")],
)  # fmt: skip
def test_the_registry_of_an_image_is_the_first_component_only_when_it_is_a_host(image: str, registry: str) -> None:
    assert registry_of(image) == registry


@pytest.mark.parametrize(
    ("key", "host"),
    [("https://index.docker.io/v1/", "docker.io"), ("docker.io", "docker.io"), ("https://ghcr.io/v2/", "ghcr.io"),
     ("http://registry.example.com:5000", "registry.example.com:5000"), (" Quay.io ", "quay.io")],
)  # fmt: skip
def test_docker_config_keys_are_normalised_to_hosts(key: str, host: str) -> None:
    assert normalise_host(key) == host


def test_I4_auth_for_picks_the_images_registry_and_the_repr_hides_the_password() -> None:
    auths = {"ghcr.io": RegistryAuth("bot", "s3cret"), "docker.io": RegistryAuth("me", "hub-pw")}
    assert auth_for("ghcr.io/acme/x:1", auths) == RegistryAuth("bot", "s3cret")
    assert auth_for("busybox", auths) == RegistryAuth("me", "hub-pw")
    assert auth_for("quay.io/a/b", auths) is None and auth_for("", auths) is None
    assert "s3cret" not in repr(auths) and "bot" in repr(auths)
