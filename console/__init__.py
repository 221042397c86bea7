"""The operator's console (design §7): a read-only mirror of the manager's memory in the
database, the admin over it, the dashboard, Prometheus metrics, health and structured logs.

- `observer`   hears the core's facts (kube.observe) and keeps the little memory they need
- `snapshot`   reads the manager's memory into rows (Handlers, Blocklist, observer); pure reads
- `mirror`     the single writer: rows diffed and written at most once a second
- `models`     the mirror's tables; `admin` their read-only pages and the one operator action
- `dashboard`  the dashboard's figures, from the mirror; `views` the pages and /readyz
- `metrics`    the Prometheus registry and /metrics; `middleware` counts API requests
- `logging`    JSON or text log lines, secrets redacted

May import vnode and placement read sides; vnode, placement and providers never import it.
"""
