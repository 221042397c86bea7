"""vnode.kubelet: the kubelet API (`kubectl logs`, `exec`, `attach`, `port-forward`) for every virtual node.

The only part of vnode that may import Daphne, Twisted and Channels. Map of the package:

- `server`     Listeners: one Daphne server, the kubelet listener (TLS) and the console listener
- `loop`       the process's one Twisted reactor (asyncio), run on a thread
- `certs`      in-memory CA and serving certificates; TLS options; client CA bundles
- `upgrade`    the request hook: listener tags (I5) and the SPDY hand-off after the 101
- `auth`       who may: client certificate, TokenReview, anonymous; SubjectAccessReview, cached;
               asked by the request hook before any route or upgrade
- `app`        the kubelet listener's ASGI app; `views` its plain HTTP routes (containerLogs, /pods, ...)
- `routes`     URL map; `logparams`, `execparams` query validation and protocol negotiation (pure)
- `resolve`    HandlerRegistry: which Handler tracks a Pod, and the 404s before any upgrade
- `problems`   the one mapping of provider errors to HTTP answers; metav1.Status bodies
- `remote`     one exec/attach session, transport-neutral, on its own threads
- `spdyexec`   that session over SPDY/3.1 (`spdy` sessions and `spdyframes` codec underneath)
- `wsexec`     that session over websocket: a Channels consumer
- `portforward` port-forward over SPDY/3.1; `portforward_pair` one forwarded connection's threads
- `spdyconn`   the SPDY connection plumbing `spdyexec` and `portforward` share (producer, clocks, close)
- `limits`     I7 on every listener: caps, heads, bodies, deadlines; `wsgilistener` a WSGI app
               on a port of its own with those bounds (the metrics listener)

Provider calls block, so they run on threads, never on the reactor. Nothing here imports
Django: the console application is handed in by the caller.
Tests: tests/vnode/kubelet/test_listeners.py.
"""
