"""The `local` provider: each instance is a set of supervised process groups on this machine,
one per container of the Pod.

provider    LocalProvider (the seam), its Shapes and the image notice
options     option parsing and the node capacity (the GPUs this machine has, or the `gpus` option)
launch      create an instance folder (volumes, one folder per container), start its supervisors,
            the launches in flight here (Launcher) and resumed launches
volumes     volumes materialised in the instance folder, mount paths under its root, path rewriting
sequence    the order of the containers: which may start, when the sidecars stop
containers  one container found by name (logs, exec, attach, restart, stop)
restart     restart in place: the next run of an ended container, under the launch lock
runs        the run count, the current run's records, the rotation to the next run
supervisor  the detached process that runs one container, stamps its output, records its exit
folder      the on-disk layout of one instance, instance ids; atomic records
reader      one container folder's current-run records and liveness, read into an Observation
status      pure: one container's records and liveness to an Instance fact
pod         pure: every container's observation to ContainerFacts and the instance's state
pids        process identity (pid + start time) and group signals
stamp       the kubelet's RFC3339 nanosecond timestamps
logs        the log file read with the kubelet's options
process     exec: pipes or a real PTY
Tests: tests/providers/local/test_local.py.
"""

from providers.local.provider import IMAGE_NOTICE, LocalProvider, image_notice

__all__ = ["IMAGE_NOTICE", "LocalProvider", "image_notice"]
