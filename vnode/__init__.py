"""The virtual kubelet: one virtual node per provider (design §5). A second storey: the top level
wires and performs, the sub-packages decide and serve; `lint-imports` keeps the arrows pointing down.

At the top (wiring and effects):
- `runner`          one per provider: its Handler, pod controller and node controller
- `podcontroller`   Pods on the node -> `model.decisions` -> performs the action, on a WorkerPool
- `nodecontroller`  the Node, its Lease, an honest Ready
- `handler`         one per provider: builds the `phases.context.PhaseContext` and the phases on it
- `podwriter`       every write about a Pod (annotations, status, the connect Secret); never reads
- `blocklister`, `poolpolicy`, `fencing`: the seams to placement, and a provider behind a Lease fence

`phases/` (one `PhaseContext` each): `provision` (the Pod parsed once at the door, sources resolved,
`provider.provision`), `statussync` (one `list()` a tick, via `inventory`), `teardown` (one
`terminate(pod or tombstone)`, the orphan sweep), `lifecycle` (restarts, replacements, releases),
`giveup`, `serving` (what `kubelet/` reads: logs, exec, attach, stats).

`model/` (pure, imports no other part of vnode): `tracking` (the record and its map), `assess` (how
facts move a record), `billing` (how facts move a Pod's billing record, the node's billing-seen-at),
`runs`, `status`, `containerstatus`, `stopping` (the grace, the deadline, the budget stop),
`probespec`, `probestate`, `decisions`.
`sources/`: `env`, `volumes`, `pullsecrets`, `reader` (Secrets and ConfigMaps). `probing/`: `prober`,
`probes`. `ephemeral/`: `containers`, `streams` (`kubectl debug`). `stats/`: `usage`, `resourcemetrics`.
`kubelet/`: the kubelet API (Daphne, SPDY, websocket).

The core imports no DRF, admin or templates, and never the embedded cluster.
Tests: tests/vnode/test_controllers.py, tests/test_layout.py::test_no_import_circle_in_the_product.
"""
