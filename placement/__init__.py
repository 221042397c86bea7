"""Placement and failover (design §6): which provider, tier and region an opted-in Pod gets,
and skipping what refused recently. Map of the package:

- `blocklist`   the in-memory blocklist (scopes, the one TTL decision + jitter, expiry order,
                read side); it satisfies `vnode.blocklister.Blocklister` structurally
- `pools`       NodePool objects parsed and validated; `poolcache` lists and watches them;
                `interruptspec` parses spec.interruption and failover.waitForCapacity, `durations`
                the durations and PoolError they share
- `request`     what a Pod asks for (read by `providers.podspec`) and whether it is placeable
- `optimizer`   pure: pool + request + offerings + blocklist lookup (+ budget headroom) -> one decision
- `budgets`     the pure budget verdict and the BudgetBook (commitments and reservations per pool)
- `attempt`     how one placement attempt ended (the controller's return value)
- `waiting`     pure: a decision that chose nothing -> what the Pod waits for, its next look, its Event
- `gated`       the register of held Pods: what each waits for, whom a change wakes (the console reads it)
- `catalog`     each provider's offerings, cached briefly (the only provider calls here); tells
                listeners when an offering becomes available
- `ungate`      pure: the one JSON patch that places a Pod (and `send`, which applies it)
- `interruptions` each workload's interruptions (counted from the Pod watch, carried on placed
                Pods) and the fallback to OnDemand after `fallbackToOnDemandAfter`
- `capacitywait` a Pod failed once it waited its pool's `failover.waitForCapacity`
- `notgated`    an opted-in Pod created without the gate (no webhook): the rule, its one Warning
- `admission`   pure AdmissionReview decision behind the console's /webhooks/pods
- `ledger`      pure: a pool's settled ledger (deleted Pods' spend) in its status: fold once per uid, prune
- `spend`       the spend book: each pool's spend from its ledger and its Pods' billing records
- `spendview`   the read side of spend (values the console shows)
- `settle`      the writes of spend on the controller's queue: the pool status, settling deleted
                Pods (finalizer `nebula.io/spend`), Stop's annotation
- `replacing`   a given-up (refused or interrupted) Pod a ReplicaSet owns deleted, so it makes a
                fresh gated one (a Job's is kept: the Job replaces it and reads it)
- `controller`  the placement controller; `wiring.start_placement` assembles everything

Imports `providers` and `kube` (client, reflector, queue, worker, events, names); never `vnode`,
the console, Django or the devcluster.
Tests: tests/placement/test_e2e_failover.py.
"""
