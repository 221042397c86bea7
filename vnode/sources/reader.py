"""What a Pod reads from the cluster: its Secrets and ConfigMaps, as text (env) or bytes (volumes, pull secrets).

Called by the provisioning phase (`vnode.phases.provision`) through the resolvers of `vnode.sources.env`,
`vnode.sources.volumes` and `vnode.sources.pullsecrets`. Reads only; never writes to the API, and never logs
an object's content (I4; see
tests/vnode/test_secrets.py::test_I4_env_values_and_credentials_reach_only_the_provider_and_connect_secret).
Tests: tests/vnode/test_reader.py.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from kube.client import Kube, NotFoundError, path_for
from vnode.sources.env import decode_secret_data


class PodReader:
    """Every reader returns None for NotFound; any other API failure raises (the resolvers
    treat it as "could not read")."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            secret = self._kube.get(path_for("secrets", namespace=namespace, name=name))
        except NotFoundError:
            return None
        return decode_secret_data(secret.get("data"))

    def read_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            configmap = self._kube.get(path_for("configmaps", namespace=namespace, name=name))
        except NotFoundError:
            return None
        return dict(configmap.get("data") or {})

    def read_secret_bytes(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A Secret's data as bytes, for volume contents; None: NotFound."""
        try:
            secret = self._kube.get(path_for("secrets", namespace=namespace, name=name))
        except NotFoundError:
            return None
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}

    def read_configmap_bytes(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A ConfigMap's `data` (UTF-8) and `binaryData` as bytes, for volume contents; None: NotFound."""
        try:
            configmap = self._kube.get(path_for("configmaps", namespace=namespace, name=name))
        except NotFoundError:
            return None
        data = {key: str(value).encode() for key, value in (configmap.get("data") or {}).items()}
        return data | {key: base64.b64decode(value) for key, value in (configmap.get("binaryData") or {}).items()}
