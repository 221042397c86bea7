"""The RunPod provider's options (the `OPTIONS` of its settings entry), parsed and checked.

Called by `RunPodProvider.__init__`: parsing only, no I/O (the API key file is read on first
use, by `credentials`). Unknown keys are errors so typos surface at start-up. The API key is
never an option: it comes from `credentials_dir` (a mounted Secret) or `RUNPOD_API_KEY`.
Tests: tests/providers/runpod/test_runpod_provider_options.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_API_BASE_URL = "https://api.runpod.io"
CLOUD_TYPES = ("SECURE", "COMMUNITY", "ALL")
# RunPod's data centres (its console's list); `regions` narrows or replaces it.
DATA_CENTRES = (
    "US-TX-3",
    "US-TX-4",
    "US-GA-1",
    "US-GA-2",
    "US-KS-2",
    "US-KS-3",
    "US-CA-2",
    "US-IL-1",
    "US-DE-1",
    "US-NC-1",
    "US-WA-1",
    "CA-MTL-1",
    "CA-MTL-2",
    "CA-MTL-3",
    "EU-RO-1",
    "EU-SE-1",
    "EU-CZ-1",
    "EU-NL-1",
    "EU-FR-1",
    "EU-NO-1",
    "EUR-IS-1",
    "EUR-IS-2",
    "AP-JP-1",
    "OC-AU-1",
)
KNOWN_KEYS = frozenset(
    {
        "api_base_url",
        "credentials_dir",
        "cloud_type",
        "regions",
        "poll_interval",
        "container_disk_gb",
        "ssh",
        "bid_multiplier",
        "spot_bid",
        "cpu_flavor",
        "request_timeout",
        "connect_timeout",
        "ssh_secret_file",
    }
)
CPU_FLAVORS = ("cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m")


@dataclass(frozen=True)
class RunPodOptions:
    api_base_url: str = DEFAULT_API_BASE_URL  # RunPod's GraphQL endpoint is `<api_base_url>/graphql`
    credentials_dir: str | None = None  # a folder holding the file RUNPOD_API_KEY (a mounted Secret)
    cloud_type: str = "SECURE"
    regions: tuple[str, ...] = DATA_CENTRES
    regions_given: bool = False  # `regions` was set: a request with no region goes to the first
    poll_interval: float = 15.0
    container_disk_gb: int = 20
    ssh: bool = True  # exits, logs, exec and usage over SSH to the pod
    bid_multiplier: float = 1.0  # spot bid per GPU = minimumBidPrice * this
    spot_bid: float | None = None  # a fixed spot bid per GPU (USD/hour) instead
    cpu_flavor: str = "cpu3g"  # CPU pods (no accelerator): RunPod's instance family
    request_timeout: float = 30.0
    connect_timeout: float = 10.0  # SSH
    ssh_secret_file: str | None = None  # the seed of the pods' SSH keys (default: derived from the API key)


def _number(options: Mapping[str, Any], key: str, default: float, *, positive: bool = True) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"runpod option {key!r} must be a number")
    if positive and value <= 0:
        raise ValueError(f"runpod option {key!r} must be positive")
    return float(value)


def _regions(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError("runpod option 'regions' is a non-empty list of data centre ids such as ['US-TX-3']")
    result: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError("runpod option 'regions' lists data centre ids such as 'EU-RO-1'")
        word = item.strip().upper()
        if word not in result:
            result.append(word)
    return tuple(result)


def parse_options(options: Mapping[str, Any]) -> RunPodOptions:
    """Validate `options`; ValueError names the option that is wrong."""
    unknown = sorted(set(options) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown option(s) for the runpod provider: {', '.join(unknown)}")
    base = options.get("api_base_url", DEFAULT_API_BASE_URL)
    if not isinstance(base, str) or not base.startswith(("http://", "https://")):
        raise ValueError("runpod option 'api_base_url' is an http(s) URL such as 'https://api.runpod.io'")
    cloud = options.get("cloud_type", "SECURE")
    if not isinstance(cloud, str) or cloud.strip().upper() not in CLOUD_TYPES:
        raise ValueError(f"runpod option 'cloud_type' is one of {', '.join(CLOUD_TYPES)}")
    for key in ("credentials_dir", "ssh_secret_file"):
        if options.get(key) is not None and not isinstance(options.get(key), str):
            raise ValueError(f"runpod option {key!r} is a path")
    if not isinstance(options.get("ssh", True), bool):
        raise ValueError("runpod option 'ssh' is true or false")
    disk = options.get("container_disk_gb", 20)
    if isinstance(disk, bool) or not isinstance(disk, int) or disk <= 0:
        raise ValueError("runpod option 'container_disk_gb' is a positive integer")
    bid = options.get("spot_bid")
    if bid is not None:
        bid = _number(options, "spot_bid", 0.0)
    if "bid_multiplier" in options and bid is not None:
        raise ValueError("runpod options 'bid_multiplier' and 'spot_bid' exclude each other")
    flavor = options.get("cpu_flavor", "cpu3g")
    if flavor not in CPU_FLAVORS:
        raise ValueError(f"runpod option 'cpu_flavor' is one of {', '.join(CPU_FLAVORS)}")
    return RunPodOptions(
        api_base_url=base.rstrip("/"),
        credentials_dir=options.get("credentials_dir"),
        cloud_type=cloud.strip().upper(),
        regions=_regions(options["regions"]) if "regions" in options else DATA_CENTRES,
        regions_given="regions" in options,
        poll_interval=_number(options, "poll_interval", 15.0),
        container_disk_gb=disk,
        ssh=bool(options.get("ssh", True)),
        bid_multiplier=_number(options, "bid_multiplier", 1.0),
        spot_bid=bid,
        cpu_flavor=str(flavor),
        request_timeout=_number(options, "request_timeout", 30.0),
        connect_timeout=_number(options, "connect_timeout", 10.0),
        ssh_secret_file=options.get("ssh_secret_file"),
    )
