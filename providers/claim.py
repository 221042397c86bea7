"""Claim identity (design §3): the name that links an instance back to its Pod.

Called by the vnode when it provisions and when it matches `list()` to Pods; providers
tag or name instances with it. Pure; never depends on anything but the three inputs.
Tests: tests/providers/test_claim.py.
"""

from __future__ import annotations

import base64
import hashlib
import re

from providers import base

MAX_LENGTH = 63
_DIGEST_LENGTH = 10


def claim_name(namespace: str, name: str, uid: str) -> base.ClaimName:
    """A lower-case DNS label (at most 63 characters) for the Pod `namespace/name/uid`.

    Deterministic; a Pod recreated with the same name has a new UID and so a new claim.
    It reads as `<cut of namespace-name>-<10 base32 characters of a SHA-256>`.
    """
    digest = hashlib.sha256(f"{namespace}/{name}/{uid}".encode()).digest()
    suffix = base64.b32encode(digest).decode().lower()[:_DIGEST_LENGTH]
    readable = re.sub(r"[^a-z0-9-]+", "-", f"{namespace}-{name}".lower())
    readable = re.sub(r"-{2,}", "-", readable)
    readable = readable[: MAX_LENGTH - _DIGEST_LENGTH - 1].strip("-") or "pod"
    return base.ClaimName(f"{readable}-{suffix}")
