"""How Nebula reaches a pod's workload over SSH: the target (root, the claim's derived key,
the runtime's public port 22), the state probe, and short commands read to the end.

Called by `RunPodProvider` for states, logs, exec and usage; the SSH work is
`providers.ssh`'s. RunPod does not publish a pod's host key, so the host is not verified
(docs/providers/runpod.md says so). Never logs a key.
Tests: tests/providers/runpod/test_runpod_provider_ssh.py.
"""

from __future__ import annotations

from typing import Any

from providers.runpod.identity import KeyPair
from providers.runpod.status import Verdict, parse_probe, ssh_address
from providers.runpod.workload import EXIT_FILE, LOG_FILE, PID_FILE, PROBE
from providers.ssh import FileLog, SshTarget, run_to_end

WORKLOAD_LOG = FileLog(LOG_FILE, EXIT_FILE, stamped=True)
USAGE_ROOTS = {"": f"cat {PID_FILE}"}
PROBE_TIMEOUT = 20.0


def target_for(pod: dict[str, Any], key: KeyPair, *, connect_timeout: float) -> SshTarget | None:
    address = ssh_address(pod)
    if address is None:
        return None
    return SshTarget(
        host=address[0],
        port=address[1],
        username="root",
        private_key=key.private_openssh,
        connect_timeout=connect_timeout,
    )


def run(target: SshTarget, command: str, *, timeout: float = PROBE_TIMEOUT) -> str:
    """The stdout of `command`; Unavailable when it could not be run to its end in time."""
    return run_to_end(target, command, timeout=timeout)


def probe(target: SshTarget) -> Verdict:
    return parse_probe(run(target, PROBE))
