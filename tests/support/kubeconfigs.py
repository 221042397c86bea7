"""A syntactically valid kubeconfig naming a server nobody serves, for tests of `runvnode`
that fail before the cluster is needed (a port in use, a bad flag): `runvnode` loads the
kubeconfig first, so without one every such run would stop at "cannot load a kubeconfig".

Used by tests/nebula_site/test_runvnode_metrics.py and tests/vnode/kubelet/test_runvnode_listeners.py.
"""

from __future__ import annotations

from pathlib import Path

UNSERVED = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def unserved_kubeconfig(folder: Path) -> str:
    """Write it into `folder`; its path."""
    path = folder / "unserved-kubeconfig"
    path.write_text(UNSERVED)
    return str(path)
