"""The virtual kubelet: one virtual node per provider (design §5).

Arrives with the virtual-kubelet issue: Handler, pod and node controllers, the poll
loop, the Runner, and `vnode.kubelet` (the kubelet API listener). The core imports no
DRF, admin or templates, and never the embedded cluster.
"""
