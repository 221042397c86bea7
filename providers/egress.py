"""A NodePool's outbound network policy (`spec.egress`), as it crosses the provider seam.

Parsed from the pool by `placement.pools`, carried to `provision` in
`ProvisionRequest.egress`, and matched against `Capabilities.egress` (the modes a provider
enforces) by placement, which skips a provider that cannot enforce its pool's policy. Pure.
Tests: tests/providers/test_egress.py.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass

MAX_TARGETS = 64
_DOMAIN = re.compile(r"^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class EgressMode(str, enum.Enum):
    """Spelled as in the NodePool's `spec.egress.mode`."""

    OPEN = "Open"  # any destination (the default)
    BLOCKED = "Blocked"  # no outbound connection at all
    ALLOWLIST = "Allowlist"  # only the listed CIDRs and domains


@dataclass(frozen=True)
class Egress:
    """Where an instance may connect to. `cidrs` and `domains` are set only for ALLOWLIST
    (at least one of them then); `domains` may start with `*.` for every subdomain."""

    mode: EgressMode = EgressMode.OPEN
    cidrs: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()

    def describe(self) -> str:
        """For Events and errors: `Open`, `Blocked`, `Allowlist (2 CIDRs, 1 domain)`."""
        if self.mode is not EgressMode.ALLOWLIST:
            return str(self.mode.value)
        parts = [f"{len(self.cidrs)} CIDR{'s' * (len(self.cidrs) != 1)}"] if self.cidrs else []
        parts += [f"{len(self.domains)} domain{'s' * (len(self.domains) != 1)}"] if self.domains else []
        return f"Allowlist ({', '.join(parts)})"


OPEN = Egress()


def target_kind(text: str) -> str:
    """`cidr` or `domain` for one allowlist entry (already stripped and lower-cased);
    ValueError saying what a target must look like."""
    try:
        ipaddress.ip_network(text, strict=True)
        return "cidr"
    except ValueError as exc:
        if "/" in text or text.replace(".", "").isdigit():
            raise ValueError(f"{text!r} is not a CIDR such as 10.0.0.0/8 (host bits must be zero): {exc}") from None
    if len(text) > 253 or not _DOMAIN.match(text):
        raise ValueError(f"{text!r} is neither a CIDR (10.0.0.0/8) nor a domain name (example.com, *.example.com)")
    return "domain"


def allowlist(targets: list[str]) -> Egress:
    """An ALLOWLIST policy from a pool's targets; ValueError naming the bad entry."""
    if not targets:
        raise ValueError("Allowlist needs at least one target (a CIDR or a domain)")
    if len(targets) > MAX_TARGETS:
        raise ValueError(f"at most {MAX_TARGETS} targets (got {len(targets)})")
    cidrs: list[str] = []
    domains: list[str] = []
    for index, raw in enumerate(targets):
        text = raw.strip().lower()
        try:
            kind = target_kind(text)
        except ValueError as exc:
            raise ValueError(f"targets[{index}]: {exc}") from None
        bucket = cidrs if kind == "cidr" else domains
        if text not in bucket:
            bucket.append(text)
    return Egress(EgressMode.ALLOWLIST, tuple(cidrs), tuple(domains))
