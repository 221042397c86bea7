"""SSH keys for instances: a fresh ed25519 pair per claim (the user's connect key), a host
key per claim (so Nebula can verify the instance), and the operator key Nebula logs in with.

Called by `AwsProvider.provision` and its logs/exec. Private halves live in memory or in
the Pod's connect Secret only; nothing here is logged, and reprs name no key material.
Tests: tests/providers/aws/test_aws_boot.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from providers.errors import Unavailable


@dataclass(frozen=True, repr=False)
class KeyPair:
    private_openssh: bytes  # "-----BEGIN OPENSSH PRIVATE KEY-----..."
    public_line: str  # "ssh-ed25519 AAAA... <comment>"

    def __repr__(self) -> str:
        return f"KeyPair({self.public_line.split()[0]})"


def _pair(key: ed25519.Ed25519PrivateKey, comment: str) -> KeyPair:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private, f"{public.decode('ascii')} {comment}".strip())


def generate_key_pair(comment: str = "") -> KeyPair:
    """A new ed25519 pair in OpenSSH formats."""
    return _pair(ed25519.Ed25519PrivateKey.generate(), comment)


def load_key_pair(private_openssh: bytes, comment: str = "") -> KeyPair:
    """The pair of an existing unencrypted ed25519 OpenSSH private key; ValueError if it is not one."""
    key = serialization.load_ssh_private_key(private_openssh, password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError("the operator key must be an ed25519 OpenSSH private key")
    return _pair(key, comment)


class OperatorKey:
    """The key Nebula logs in with: read from `key_file` on first use, else generated once
    per process (then only instances launched by this process can be reached)."""

    def __init__(self, key_file: str | None) -> None:
        self._key_file = key_file
        self._pair: KeyPair | None = None
        self._lock = threading.Lock()

    def get(self) -> KeyPair:
        with self._lock:
            if self._pair is None:
                self._pair = self._load() if self._key_file else generate_key_pair("nebula-operator")
            return self._pair

    def _load(self) -> KeyPair:
        assert self._key_file is not None
        try:
            return load_key_pair(Path(self._key_file).read_bytes(), "nebula-operator")
        except (OSError, ValueError) as exc:
            raise Unavailable(f"the aws provider's ssh_key_file {self._key_file!r} cannot be used") from exc
