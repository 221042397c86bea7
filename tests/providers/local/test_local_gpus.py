"""Honest local GPU capacity: the node declares the GPUs this machine has (the NVIDIA
driver's entries, none without it), the `gpus` option declares more for demos, and a Pod
asking for more than the node declares is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.base import ClaimName, InstanceState, ProvisionRequest
from providers.errors import InvalidRequest
from providers.local import LocalProvider, options
from tests.support.factories import make_pod_spec
from tests.support.local_cleanup import kill_leftovers
from tests.support.polling import wait_for

CLAIM = ClaimName("ns-gpu-abcdefghij")


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    kill_leftovers(tmp_path)


def test_the_machine_s_gpus_are_the_nvidia_driver_s_entries_and_none_without_it(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    assert options.machine_gpus(gpus) == 0  # no driver
    gpus.mkdir()
    for address in ("0000:01:00.0", "0000:02:00.0"):
        (gpus / address).mkdir()
    assert options.machine_gpus(gpus) == 2


def test_the_node_declares_the_machine_s_gpus_not_an_unbounded_number(state: Path) -> None:
    capacity = LocalProvider("local", {"state_dir": str(state)}).capabilities().capacity
    assert capacity["nvidia.com/gpu"] == str(options.machine_gpus())
    assert int(capacity["nvidia.com/gpu"]) < 1000


def test_without_gpus_a_pod_asking_for_one_is_refused(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "NVIDIA_GPUS", state / "no-driver")
    provider = LocalProvider("local", {"state_dir": str(state)})
    assert provider.capabilities().capacity["nvidia.com/gpu"] == "0"
    with pytest.raises(InvalidRequest, match="no accelerators"):
        provider.provision(make_pod_spec(args=("true",), gpu_count=1, accelerator="t4"), ProvisionRequest(CLAIM))


def test_the_gpus_option_declares_more_for_demos_and_bounds_what_a_pod_may_ask(state: Path) -> None:
    provider = LocalProvider("local", {"state_dir": str(state), "gpus": 4, "grace_period": 1})
    assert provider.capabilities().capacity["nvidia.com/gpu"] == "4"
    with pytest.raises(InvalidRequest, match=r"has 4 GPUs \(option 'gpus'\); the Pod asks for 5"):
        provider.provision(make_pod_spec(args=("true",), gpu_count=5, accelerator="t4"), ProvisionRequest(CLAIM))
    pod = make_pod_spec(args=("echo trained",), gpu_count=2, accelerator="t4")
    instance_id = provider.provision(pod, ProvisionRequest(CLAIM)).instance_id
    wait_for(lambda: (i := provider.get(instance_id)) is not None and i.state is InstanceState.SUCCEEDED)
    provider.terminate(instance_id)


@pytest.mark.parametrize("bad", [-1, "two", True, 1.5])
def test_the_gpus_option_is_a_whole_number(state: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="'gpus' must be a whole number"):
        LocalProvider("local", {"state_dir": str(state), "gpus": bad})
