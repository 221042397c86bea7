"""Test infrastructure: unsigned JWTs for the fake Modal (AuthTokenGet and the command
router's bearer token); the SDK only parses `exp`, the fake checks the token is one it issued.
Tests: tests/providers/modal/test_modal_fake_exec.py
"""

from __future__ import annotations

import base64
import json
import secrets as random
import time

from providers.modal.fake.state import State


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make(state: State, ttl: float) -> str:
    """A new token valid for `ttl` seconds, remembered in `state.jwts`."""
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    payload = _b64(json.dumps({"exp": int(time.time() + ttl), "jti": random.token_hex(8)}).encode())
    token = f"{header}.{payload}.{_b64(random.token_bytes(16))}"
    with state.lock:
        state.jwts.add(token)
    return token
