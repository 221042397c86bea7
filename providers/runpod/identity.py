"""Which pods are this owner's, and each pod's SSH key.

RunPod has no tags, so a pod's NAME carries its owner and claim:
`nebula-<10 hex of SHA-256(owner key)>-<claim>` (at most 81 characters: a claim is a DNS
label of at most 63), and its env carries them in full (`NEBULA_OWNER`, `NEBULA_CLAIM`,
plus `NEBULA_TIER` and `NEBULA_REGION`). A pod is ours only when both agree: a name of
another owner, or a hash collision, is never listed, adopted or terminated.

SSH: each pod's key pair is derived, not stored: an ed25519 seed from HKDF-SHA256 of a
secret (the `ssh_secret_file` contents, else the API key) with the owner key and the claim.
It is fresh per pod (per claim), its private half goes once to the connect Secret, and a
restarted manager derives it again from the name of any pod it lists: no key store. Rotating
the secret (or the API key, without `ssh_secret_file`) cuts SSH to older pods.
Called by `RunPodProvider`. Pure but for `KeySource` reading the secret file.
Tests: tests/providers/runpod/test_runpod_provider_options.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from providers import base
from providers.errors import Unavailable
from providers.owner import Owner

ENV_CLAIM = "NEBULA_CLAIM"
ENV_OWNER = "NEBULA_OWNER"
ENV_TIER = "NEBULA_TIER"
ENV_REGION = "NEBULA_REGION"
_NAME = re.compile(r"^nebula-([0-9a-f]{10})-([a-z0-9][-a-z0-9]{0,62})$")


def owner_hash(owner: Owner) -> str:
    return hashlib.sha256(owner.key.encode()).hexdigest()[:10]


def pod_name(owner: Owner, claim: str) -> str:
    return f"nebula-{owner_hash(owner)}-{claim}"


def env_of(pod: Mapping[str, object]) -> dict[str, str]:
    """A pod's env (RunPod answers a list of `KEY=value`), only its NEBULA_ keys: never
    keep the other values (they may be Secrets)."""
    result: dict[str, str] = {}
    items = pod.get("env")
    for item in items if isinstance(items, list) else ():
        key, _, value = str(item).partition("=")
        if key.startswith("NEBULA_") and key != "NEBULA_WORKLOAD":
            result[key] = value
    return result


def claim_of(pod: Mapping[str, object], owner: Owner) -> base.ClaimName | None:
    """The claim of one of this owner's pods; None for any other pod."""
    match = _NAME.match(str(pod.get("name") or ""))
    if not match or match.group(1) != owner_hash(owner):
        return None
    env = env_of(pod)
    if env.get(ENV_OWNER) != owner.key or env.get(ENV_CLAIM) != match.group(2):
        return None
    return base.ClaimName(match.group(2))


def tier_of(pod: Mapping[str, object]) -> base.Tier:
    if str(pod.get("podType") or "") == "INTERRUPTABLE":
        return base.Tier.SPOT
    return base.Tier.parse(env_of(pod).get(ENV_TIER)) or base.Tier.ON_DEMAND


@dataclass(frozen=True, repr=False)
class KeyPair:
    private_openssh: bytes
    public_line: str

    def __repr__(self) -> str:
        return "KeyPair(ssh-ed25519)"


class KeySource:
    """Derives pods' key pairs from the secret `secret()` returns (bytes)."""

    def __init__(self, secret: Callable[[], bytes]) -> None:
        self._secret = secret

    def __repr__(self) -> str:
        return "KeySource()"

    def pair(self, owner: Owner, claim: str) -> KeyPair:
        seed = HKDF(hashes.SHA256(), 32, salt=b"nebula-runpod-ssh-v1", info=f"{owner.key}/{claim}".encode()).derive(
            self._secret()
        )
        key = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        return KeyPair(private, f"{public.decode('ascii')} nebula-{claim}")


def file_secret(path: str) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            data = Path(path).read_bytes().strip()
        except OSError as exc:
            raise Unavailable(f"the runpod provider's ssh_secret_file {path!r} cannot be read") from exc
        if len(data) < 16:
            raise Unavailable(f"the runpod provider's ssh_secret_file {path!r} holds fewer than 16 bytes")
        return data

    return read


def secret_values(envs: Sequence[Mapping[str, str]]) -> list[str]:
    return sorted({value for env in envs for value in env.values() if value})
