"""Compute providers behind one seam (`providers.base`).

base      the Provider protocol, frozen seam values, UNBOUNDED_CAPACITY; re-exports the rest
streams   the optional protocols (LogStreamer, Executor, ...) and LogOptions; imports ids, not base
ids       InstanceId and ClaimName, the bottom of the seam
claimlocks  one lock per claim (`with locks.held(claim):`), pruned when idle
errors    the only exceptions a provider may raise
claim     claim_name(): the identity linking an instance to its Pod
podspec   the provider's read-only view of a Pod
registry  build providers from settings by alias and import path
local/    instances are process groups on this machine (the embedded default)
fake/     an in-memory cloud with scripted faults, for tests, demos and benchmarks
aws/      EC2 instances, one per Pod (boto3 imported lazily, only there)
ssh/      SSH logs and exec for any VM provider (asyncssh)

Providers report facts; they never import vnode, placement, nebula_site, devcluster or
Django, nor each other. Cloud SDKs are imported lazily inside their own package.
Tests: tests/providers/test_registry.py.
"""
