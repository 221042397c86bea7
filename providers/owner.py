"""Instance ownership: which cluster and which provider alias an instance belongs to.

Built by the provider registry from the manager's cluster identity; every provider stamps
`Owner.key` on what it creates and sees only instances that carry it. Pure.
Tests: tests/providers/test_owner.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
STANDALONE_CLUSTER = "standalone"  # the cluster of a provider built without one (tests, tools)


@dataclass(frozen=True)
class Owner:
    """Whose instances these are: one cluster (its `NEBULA['CLUSTER_NAME']`, else the UID of
    its `kube-system` Namespace) and one provider alias within it.

    Every instance a provider creates carries `key` (as a tag, a label or a name part), and
    `list`, `get`, `terminate` and `provision`'s idempotency see only instances that carry
    this owner's key: two clusters sharing one cloud account, or two aliases sharing one
    machine, never see each other's instances. An instance with no owner key (made by a
    Nebula before owners existed) is never listed, adopted or swept.
    """

    cluster: str
    alias: str

    def __post_init__(self) -> None:
        for what, value in (("cluster name", self.cluster), ("provider alias", self.alias)):
            if not _LABEL.match(value):
                raise ValueError(f"{what} {value!r} must be a DNS label: lower-case letters, digits and '-'")

    @property
    def key(self) -> str:
        """`<cluster>.<alias>`: unambiguous, since neither part may contain a dot."""
        return f"{self.cluster}.{self.alias}"

    @classmethod
    def standalone(cls, alias: str) -> Owner:
        """The owner of a provider built outside a manager (a test, `manage.py fakecloud`)."""
        return cls(STANDALONE_CLUSTER, alias)


class Owned:
    """The `name` and `owner` every provider answers with: the constructor sets `_name` (the
    alias) and `_owner`; mixed into each provider class so the two properties are written once."""

    _name: str
    _owner: Owner

    @property
    def name(self) -> str:
        """Stable id; the virtual node is `nebula-<name>`."""
        return self._name

    @property
    def owner(self) -> Owner:
        """Whose instances this provider object sees and stamps."""
        return self._owner
