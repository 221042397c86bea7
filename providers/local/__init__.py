"""The `local` provider: each instance is a supervised process group on this machine.

provider    LocalProvider (the seam) and the image notice
options     option parsing and the node capacity
launch      create an instance folder and start its supervisor
restart     restart in place: the next run of an ended workload, under the launch lock
runs        the run count, the current run's records, the rotation to the next run
supervisor  the detached process that runs the workload, stamps its output, records its exit
folder      the on-disk layout of one instance, instance ids; atomic records
reader      one folder's current-run records and liveness, read into an Observation
status      pure: records and liveness to an Instance fact
proc        process identity (pid + start time) and group signals
stamp       the kubelet's RFC3339 nanosecond timestamps
logs        the log file read with the kubelet's options
process     exec: pipes or a real PTY
Tests: tests/providers/local/test_local.py.
"""

from providers.local.provider import IMAGE_NOTICE, LocalProvider, image_notice

__all__ = ["IMAGE_NOTICE", "LocalProvider", "image_notice"]
