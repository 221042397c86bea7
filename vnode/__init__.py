"""The virtual kubelet: one virtual node per provider (design §5).

- `runner`         one per provider: its Handler, pod controller and node controller
- `podcontroller`  Pods on the node -> `decisions.decide` -> the Handler, on a WorkerPool
- `nodecontroller` the Node, its Lease, an honest Ready
- `handler`        the facade over the phases below, one per provider
- `provision`      the shape check, env (`env`), volumes (`volumes`), `provider.provision`, refusals
- `statussync`     the poll loop and its tick: one `provider.list()` (`inventory`) -> `status`
  (`containerstatus` for an instance that reports each container's facts)
- `teardown`       terminate for deleted Pods, the orphan sweep
- `serving`        what the kubelet API (`vnode.kubelet`) reads: logs, exec, attach, stats
  (`usage`: the providers' samples and the stats Summary; `resourcemetrics`: /metrics/resource)
- `ephemeral`      `kubectl debug`: ephemeral containers as processes via `Executor` (`ephemeralio` their output)
- `prober`         startup/readiness/liveness probes from the manager (`probespec`, `probes`, `probestate`)
- `tracking`       the tracked map; `podwriter` every write about a Pod

The core imports no DRF, admin or templates, and never the embedded cluster.
Tests: tests/vnode/test_controllers.py.
"""
