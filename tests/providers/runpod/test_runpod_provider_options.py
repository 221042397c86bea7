"""The RunPod provider's pure parts: options (each bad one named), the GPU table and CPU
sizes, pod names and ownership, derived SSH keys, the wrapper and probe parsing."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from providers.base import PodSpec, Tier
from providers.errors import InvalidRequest
from providers.owner import Owner
from providers.runpod import RunPodProvider, catalog, identity, workload
from providers.runpod.options import DATA_CENTRES, parse_options
from providers.runpod.status import parse_probe


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"api_base_url": "ftp://x"}, "api_base_url"),
        ({"cloud_type": "CHEAP"}, "cloud_type"),
        ({"regions": "US-TX-3"}, "regions"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"container_disk_gb": 1.5}, "container_disk_gb"),
        ({"ssh": "yes"}, "ssh"),
        ({"spot_bid": -1}, "spot_bid"),
        ({"spot_bid": 0.3, "bid_multiplier": 2}, "spot_bid"),
        ({"cpu_flavor": "big"}, "cpu_flavor"),
        ({"colour": 1}, "colour"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        RunPodProvider("runpod", options)


def test_defaults_and_normalised_values() -> None:
    parsed = parse_options({"regions": ["us-tx-3", "EU-RO-1", "US-TX-3"], "cloud_type": "community"})
    assert parsed.regions == ("US-TX-3", "EU-RO-1") and parsed.regions_given and parsed.cloud_type == "COMMUNITY"
    default = parse_options({})
    assert default.regions == DATA_CENTRES and not default.regions_given and default.ssh


def test_gpu_names_and_cpu_sizes() -> None:
    assert catalog.gpu_type_for("h100") == "NVIDIA H100 80GB HBM3"
    assert catalog.gpu_type_for("A100-80GB") == "NVIDIA A100-SXM4-80GB"
    assert catalog.gpu_type_for("rtx4090") == "NVIDIA GeForce RTX 4090"
    assert catalog.gpu_type_for("NVIDIA L40S") == "NVIDIA L40S"
    assert catalog.accelerator_for("NVIDIA GeForce RTX 4090") == "rtx4090"
    with pytest.raises(InvalidRequest, match="tpu"):
        catalog.gpu_type_for("tpu")
    small = PodSpec("d", "p", "u", "c", "img", cpu=0.5, memory=2**30)
    assert catalog.cpu_instance_for(small, "cpu3g") == "cpu3g-2-8"
    big = PodSpec("d", "p", "u", "c", "img", cpu=6, memory=40 * 2**30)
    assert catalog.cpu_instance_for(big, "cpu3g") == "cpu3g-16-64"
    with pytest.raises(InvalidRequest, match="resources"):
        catalog.cpu_instance_for(PodSpec("d", "p", "u", "c", "img", cpu=64), "cpu3c")


def test_names_and_env_must_both_name_the_owner() -> None:
    owner = Owner("cluster-a", "runpod")
    name = identity.pod_name(owner, "default-w-abcdefghij")
    env = ["NEBULA_OWNER=cluster-a.runpod", "NEBULA_CLAIM=default-w-abcdefghij", "API_TOKEN=secret"]
    assert len(name) <= 81
    assert identity.claim_of({"name": name, "env": env}, owner) == "default-w-abcdefghij"
    assert identity.claim_of({"name": name, "env": env[1:]}, owner) is None
    assert identity.claim_of({"name": name, "env": env}, Owner("cluster-b", "runpod")) is None
    assert identity.claim_of({"name": "my-own-pod", "env": env}, owner) is None
    assert "API_TOKEN" not in identity.env_of({"env": env})
    assert identity.tier_of({"podType": "INTERRUPTABLE"}) is Tier.SPOT


def test_keys_are_per_claim_and_derived_again(tmp_path: Path) -> None:
    owner = Owner.standalone("runpod")
    keys = identity.KeySource(lambda: b"an api key of some length")
    first, again = (
        keys.pair(owner, "claim-a"),
        identity.KeySource(lambda: b"an api key of some length").pair(owner, "claim-a"),
    )
    assert first.public_line == again.public_line and first.public_line.startswith("ssh-ed25519 ")
    loaded = serialization.load_ssh_private_key(again.private_openssh, password=None)
    public = loaded.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert first.public_line.startswith(public.decode())
    assert keys.pair(owner, "claim-b").public_line != first.public_line
    assert "PRIVATE" not in repr(first) and repr(keys) == "KeySource()"
    short = tmp_path / "seed"
    short.write_text("x")
    from providers.errors import Unavailable

    with pytest.raises(Unavailable, match="ssh_secret_file"):
        identity.file_secret(str(short))()


def test_the_wrapper_stamps_output_and_marks_the_exit(tmp_path: Path) -> None:
    pod = PodSpec("d", "p", str(uuid.uuid4()), "c", "img", ("sh", "-c", "echo out; echo err >&2; exit 5"))
    text = workload.script(pod).replace(workload.STATE_DIR, str(tmp_path)).replace("while :; do sleep 3600; done", "")
    subprocess.run(["bash", "-c", text], check=True, timeout=30)
    lines = (tmp_path / "workload.log").read_text().splitlines()
    assert sorted(line.split(" ", 1)[1] for line in lines) == ["err", "out"]
    verdict = parse_probe(f"started 100\nexit {(tmp_path / 'exit').read_text().strip()}\n")
    assert verdict.exit_code == 5 and verdict.started is not None and verdict.finished is not None
    assert parse_probe("").exit_code is None
