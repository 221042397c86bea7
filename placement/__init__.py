"""Placement and failover (design §6): which provider, tier and region an opted-in Pod gets,
and skipping what refused recently. Map of the package:

- `blocklister` the protocol the vnode Handler writes refusals through
- `blocklist`   the in-memory blocklist (scopes, TTL + jitter, expiry order, read side)
- `pools`       NodePool objects parsed and validated; `poolcache` lists and watches them
- `request`     what a Pod asks for (pool, accelerator, GPU count) and whether it is placeable
- `optimizer`   pure: pool + request + offerings + blocklist lookup -> one decision
- `catalog`     each provider's offerings, cached briefly (the only provider calls here)
- `admission`   pure AdmissionReview decision behind the console's /webhooks/pods
- `controller`  the placement controller; `wiring.start_placement` assembles everything

Imports providers and vnode's client pieces (kube, reflector, queue, events, names); never
vnode's controllers, Django or the devcluster.
"""
