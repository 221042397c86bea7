"""The identifiers that cross the seam: `InstanceId` (a provider's name for an instance) and
`ClaimName` (the name linking an instance to its Pod, made by `providers.claim`).

The bottom of the seam: `providers.streams` and `providers.base` import it (base re-exports
both names); it imports nothing of Nebula and holds no logic.
Tests: tests/providers/test_claim.py.
"""

from __future__ import annotations

from typing import NewType

InstanceId = NewType("InstanceId", str)
ClaimName = NewType("ClaimName", str)
