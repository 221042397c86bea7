"""Nebula's small controller-runtime: what every controller needs of Kubernetes, and nothing of Nebula.

- `client`     the API client (`Kube`, `path_for`, the error types)
- `reflector`  list-and-watch into a cache, re-listing after 410 Gone
- `workqueue`  a rate-limited queue of keys, never two workers on one key
- `worker`     the worker pool over a queue: one retry vocabulary, stop within a deadline
- `events`     the Event recorder (aggregated, rate-limited)
- `leases`     every Lease replicas hold: one alive rule (this process's monotonic clock), fences
- `leader`     leader election: a thin holder of one Lease over `leases`
- `sharing`    the loop that shares providers out across replicas on node Leases (any `Shareable` Runner)
- `names`      every label, annotation, taint and Event reason Nebula writes
- `observe`    the facts the loops report, for whoever listens (the console)
- `times`      the API server's timestamp forms

Imports nothing of Nebula (an import-linter contract); vnode and placement build on it.
Tests: tests/kube/test_worker.py.
"""
