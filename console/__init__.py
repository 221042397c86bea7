"""The operator's console (design §7): a read-only mirror of the manager's memory in the
database, the admin over it, the dashboard, the REST API, Prometheus metrics and health.

- `observer`   hears the core's facts (kube.observe) and keeps the little memory they need
- `runtime`    the registry of running machinery (Handlers, Blocklist, placement) it reads
- `clusterpods` the Pods and nodes other replicas serve, watched from the cluster, slim and bounded
- `rows`       the one read-side projection: memory into rows, for the mirror and the API alike
- `snapshot`   those rows keyed per mirror table and fitted to its columns
- `mirror`     the single writer: rows diffed and written at most once a second
- `models`     the mirror's tables; `admin` their read-only pages and the one operator action
- `dashboard`  the dashboard's figures, from the mirror; `views` the pages and /readyz
- `metrics`    the Prometheus registry; `middleware` counts API requests
- `gauges`     the gauges read from memory at scrape time (providers up, orphans, spend, leader)
- `exporter`   the metrics listener's app: /metrics, optional token auth (served by nebula_site.manager.listeners)
- `api`        the REST API (DRF) over the same rows
- `forward`    a standby's forwarder to the leader's console; `leaderpeer` where that is

May import vnode and placement read sides; vnode, placement and providers never import it,
and it never imports nebula_site (the site and the process wiring sit on top).
Tests: tests/console/test_console_units.py.
"""
