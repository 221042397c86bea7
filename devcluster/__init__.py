"""devcluster: Nebula's embedded, single-process Kubernetes API server (demos and tests only).

The analogue of envtest/kwok, never a production path. It imports nothing from vnode,
placement, providers, nebula_site or Django. Map of the package:

- `cluster`     DevCluster: assembles, starts and stops everything below (the public entry point)
- `server`      HTTPS transport: threads, TLS handshake, body bounds, watch and proxy streams
- `api`         one request in, one reply out: routing, media types, selectors, Tables
- `routing`     URL shapes to (resource, namespace, name, subresource)
- `discovery`   /api, /apis, group-version documents, /version, /openapi/v2
- `resources`   verbs with the real server's semantics: bookkeeping, finalizers, graceful
                Pod deletion, owner-reference GC, status subresource, patches, binding
- `kinds`       kind-specific defaulting and validation (Pod, Secret, Namespace, CRD)
- `registry`    served resource types, built-in and from CRDs
- `store`       objects, the global resourceVersion, bounded history, watch registration
- `watch`       per-watcher bounded queues and selector transitions
- `watchstream` the watch hub: one thread writing every stream (initial events, bookmarks, 410)
- `schedloop`   the scheduler thread around the pure `scheduler` decisions
- `controlloop` the thread shape the scheduler and the apps controller share
- `admission`   calls registered mutating webhooks on Pod CREATE
- `reviews`     TokenRequest, TokenReview, (Self)SubjectAccessReview, answered from `tokens`
                (ServiceAccount and admin tokens) and `rbac` (the RBAC authorizer)
- `controllers` the minimal Deployment -> ReplicaSet -> Pods controller
- `tls`         in-memory CA, server certificate, kubeconfig
- `nodeaddress` which Node address and port the kubelet proxy dials (kube-apiserver's rule)
- `requestlog`  the request log tests and benchmarks count
- `selectors`, `patch`, `protobuf`, `tables`, `scheduler`, `proxy`: pure pieces and the
  kubelet proxy, each with its own tests
"""

from devcluster.cluster import DevCluster
from devcluster.requestlog import RequestLog, RequestRecord

__all__ = ["DevCluster", "RequestLog", "RequestRecord"]
