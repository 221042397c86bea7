"""A NodePool's `spec.egress` and `spec.provisioningTimeout`: parsed with messages naming the
field, and served to the vnode by the pool cache as a `vnode.poolpolicy.PoolPolicies` (Open
and no timeout for no pool, an unknown or an invalid one), read from a real API server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.poolcache import NODEPOOLS, PoolCache
from placement.pools import DEFAULT_PROVISIONING_TIMEOUT, PoolError, parse_pool
from providers.egress import OPEN, Egress, EgressMode
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for
from vnode.poolpolicy import PoolPolicies


def pool(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": 1}, "spec": {"providers": [{"name": "gpu-a"}], **spec}}


def test_without_the_fields_a_pool_is_open_and_times_out_after_ten_minutes() -> None:
    parsed = parse_pool(pool())
    assert parsed.egress == OPEN
    assert parsed.provisioning_timeout == DEFAULT_PROVISIONING_TIMEOUT == 600.0
    assert parse_pool(pool(egress={}, provisioningTimeout="10m")).egress == OPEN  # what the CRD's defaults write


def test_egress_and_timeout_parse() -> None:
    blocked = parse_pool(pool(egress={"mode": "Blocked"}, provisioningTimeout="1h30m"))
    assert blocked.egress == Egress(EgressMode.BLOCKED)
    assert blocked.provisioning_timeout == 5400.0
    allow = parse_pool(pool(egress={"mode": "Allowlist", "targets": ["10.0.0.0/8", " PyPI.org ", "*.example.com"]}))
    assert allow.egress == Egress(EgressMode.ALLOWLIST, ("10.0.0.0/8",), ("pypi.org", "*.example.com"))
    assert allow.egress.describe() == "Allowlist (1 CIDR, 2 domains)"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"egress": "Blocked"}, "spec.egress: must be an object such as {mode: Allowlist"),
        ({"egress": {"mode": "blocked"}}, "spec.egress.mode: 'blocked' is not one of Open, Blocked, Allowlist "
         "(case matters); did you mean Blocked?"),
        ({"egress": {"mode": "Closed"}}, "spec.egress.mode: 'Closed' is not one of Open, Blocked, Allowlist"),
        ({"egress": {"mode": "Open", "hosts": []}}, "spec.egress: unknown fields ['hosts']; allowed: mode, targets"),
        ({"egress": {"mode": "Blocked", "targets": ["10.0.0.0/8"]}},
         "spec.egress.targets: only with mode Allowlist (mode is Blocked); remove them"),
        ({"egress": {"mode": "Allowlist"}}, "spec.egress.targets: Allowlist needs a list of CIDRs or domains"),
        ({"egress": {"mode": "Allowlist", "targets": []}}, "spec.egress.targets: Allowlist needs at least one target"),
        ({"egress": {"mode": "Allowlist", "targets": ["10.0.0.0/8", "pypi.org", "10.0.0.1/8"]}},
         "spec.egress.targets[2]: '10.0.0.1/8' is not a CIDR such as 10.0.0.0/8 (host bits must be zero)"),
        ({"egress": {"mode": "Allowlist", "targets": ["bad host"]}},
         "spec.egress.targets[0]: 'bad host' is neither a CIDR (10.0.0.0/8) nor a domain name"),
        ({"provisioningTimeout": "ten minutes"},
         "spec.provisioningTimeout: 'ten minutes' is not a duration such as 30s, 5m or 1h30m"),
        ({"provisioningTimeout": 600}, "spec.provisioningTimeout: 600 is not a duration such as 30s, 5m or 1h30m"),
        ({"provisioningTimeout": "25h"}, "spec.provisioningTimeout: '25h' is out of range; use between 1s and 24h"),
    ],
)  # fmt: skip
def test_invalid_egress_and_timeouts_name_the_field_and_the_fix(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolError) as raised:
        parse_pool(pool(**spec))
    assert str(raised.value).startswith(message), str(raised.value)


def nodepool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": name},
        "spec": {"providers": [{"name": "gpu-a"}], **spec},
    }


@pytest.fixture
def pools(cluster: DevCluster) -> Iterator[PoolCache]:
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    cache = PoolCache(kube_for(cluster), kube_for(cluster), policy_sync_wait=10.0)
    cache.start()
    yield cache
    cache.stop()


def test_the_pool_cache_serves_each_pools_policy_and_defaults(kube: Kube, pools: PoolCache) -> None:
    policies: PoolPolicies = pools  # the vnode's protocol, by structure (placement never imports vnode)
    for obj in (
        nodepool("sealed", egress={"mode": "Blocked"}, provisioningTimeout="90s"),
        nodepool("allow", egress={"mode": "Allowlist", "targets": ["10.1.0.0/16", "pypi.org"]}),
        nodepool("plain"),
        nodepool("broken", egress={"mode": "Allowlist", "targets": ["10.0.0.1/8"]}),
    ):
        kube.create(NODEPOOLS, obj)
    wait_for(lambda: len(pools.pools()) == 4)
    assert policies.egress_of("sealed") == Egress(EgressMode.BLOCKED)
    assert policies.provisioning_timeout_of("sealed") == 90.0
    assert policies.egress_of("allow") == Egress(EgressMode.ALLOWLIST, ("10.1.0.0/16",), ("pypi.org",))
    assert policies.provisioning_timeout_of("allow") == 600.0
    assert (policies.egress_of("plain"), policies.provisioning_timeout_of("plain")) == (OPEN, 600.0)
    for absent in (None, "", "missing", "broken"):
        assert (policies.egress_of(absent), policies.provisioning_timeout_of(absent)) == (OPEN, None)
    broken = pools.get("broken")
    assert broken is not None and broken.error.startswith("spec.egress.targets[0]: '10.0.0.1/8' is not a CIDR")

    kube.patch(path_for(names.NODEPOOL_PLURAL, name="sealed", group=names.NODEPOOL_GROUP,
                        version=names.NODEPOOL_VERSION), {"spec": {"egress": {"mode": "Open"}}})  # fmt: skip
    assert wait_for(lambda: policies.egress_of("sealed") == OPEN)


def test_before_the_first_list_a_read_waits_once_then_reads_pools_as_absent(cluster: DevCluster) -> None:
    cache = PoolCache(kube_for(cluster), kube_for(cluster), policy_sync_wait=0.5)  # never started: never lists
    started = time.monotonic()
    assert cache.egress_of("sealed") == OPEN
    waited = time.monotonic() - started
    started = time.monotonic()
    assert cache.provisioning_timeout_of("sealed") is None
    again = time.monotonic() - started
    assert waited >= 0.5 > again  # one wait, not one per Pod
