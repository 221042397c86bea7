"""The embedded cluster's last step: on a stop of `runvnode --dev-cluster`, terminate every
instance its providers hold (`terminate_instances`), since nothing can delete those Pods once
the in-process API server is gone, and say so in one line.

Pushed on the ordered stop by `nebula_site.manager.main` for `--dev-cluster` only, to run once
the Runners stopped; against a real cluster instances outlive a manager restart and this never
runs. Never touches the API server: the provider alone, within the stop's remaining grace.
Tests: tests/nebula_site/test_devstart.py::test_ctrl_c_terminates_every_process_a_pod_started,
tests/nebula_site/test_devstart.py::test_against_a_real_cluster_a_stop_leaves_the_instances_running,
tests/nebula_site/test_devstart.py::test_terminate_instances_waits_until_each_is_gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from providers import base
from providers.errors import ProviderError

logger = logging.getLogger(__name__)

POLL = 0.1  # seconds between reads of the instances still going


def terminate_instances(
    providers: Mapping[str, base.Provider],
    timeout: float,
    *,
    say: Callable[[str], None],
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Ask every provider to terminate each instance it lists, then wait up to `timeout`
    seconds until each is gone (`get` says None or TERMINATED); say one line with the count
    and return how many are still going. A provider that cannot be asked is logged and skipped."""
    deadline = monotonic() + timeout
    going: list[tuple[base.Provider, base.InstanceId]] = []
    for provider in providers.values():
        try:
            for instance in provider.list():
                provider.terminate(instance.id)
                going.append((provider, instance.id))
        except ProviderError as exc:
            logger.warning("cannot terminate the instances of %s: %s", provider.name, exc)
    asked = len(going)
    while going:
        going = [(provider, id_) for provider, id_ in going if not _gone(provider, id_)]
        if not going or monotonic() >= deadline:
            break
        sleep(POLL)
    if asked or going:
        left = f"; {len(going)} still stopping after {timeout:.0f}s" if going else ""
        noun = "instance" if asked == 1 else "instances"
        say(f"terminated {asked} {noun} of the embedded cluster's Pods (none could be deleted after it stops){left}")
    return len(going)


def _gone(provider: base.Provider, instance_id: base.InstanceId) -> bool:
    try:
        instance = provider.get(instance_id)
    except ProviderError:
        return False
    return instance is None or instance.state is base.InstanceState.TERMINATED
