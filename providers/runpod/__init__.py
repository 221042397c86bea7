"""The RunPod provider: one pod per Pod, on RunPod's GraphQL API with the `runpod` SDK's
query texts and error types.

provider  `RunPodProvider`: the seam (provision, list, get, terminate, offerings, logs, exec, usage)
api       the GraphQL client (per-provider URL and key; why not `ctl_commands`: see there)
classify  SDK, HTTP and GraphQL failures -> `providers.errors`; refusal -> block scope
identity  owner and claim in the pod's name and env; derived per-pod SSH keys
status    pod -> `Instance`; workload  the wrapper start command; remote  SSH target and probe
catalog   accelerator names -> GPU type ids, CPU instances, gpuTypes -> offerings
options   settings

Imports `providers.ssh` but no other provider. Without the SDK or asyncssh (the `runpod` extra)
importing the package raises `providers.extras.MissingExtraError`.
Tests: tests/providers/runpod/test_runpod_provider.py.
"""

from providers import extras

extras.require("runpod", "asyncssh", extra="runpod")  # before anything that imports the SDK

from providers.runpod.provider import RunPodProvider  # noqa: E402

__all__ = ["RunPodProvider"]
