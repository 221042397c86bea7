"""The fake cloud's scenario: its offerings, region groups, timings and scripted output.

Parsed from a YAML file or an inline mapping by `load_scenario`; read by the cloud, the
provider's pure methods and the HTTP service. Pure values and parsing only: it never
holds instance state, and it reads a file only when asked to load one.
Tests: tests/providers/fake/test_fake_provider.py.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from providers import base
from providers.fake.usage import UsageScript, parse_usage

DEFAULT_NODE_CAPACITY: Mapping[str, str] = {"cpu": "1000", "memory": "4Ti", "pods": "1000", "nvidia.com/gpu": "1000"}

DEFAULT_SCENARIO: Mapping[str, Any] = {
    "poll_interval": 1.0,
    "list_lag": 0.0,
    "termination_delay": 0.0,
    "retention_seconds": 3600.0,
    "regions": {"us": ["us-east-1", "us-west-2"], "eu": ["eu-west-1"]},
    "offerings": [
        {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1},
        {
            "accelerator": "h100",
            "gpu_count": 8,
            "tiers": ["Spot", "OnDemand"],
            "regions": ["us-east-1", "eu-west-1"],
            "hourly_price": {"Spot": 34.41, "OnDemand": 98.32},
            "instance_type": "fake.h100x8",
        },
    ],
}


@dataclass(frozen=True)
class OfferingSpec:
    """One sellable shape in one tier and region, with the fake's own behaviour."""

    accelerator: str | None
    gpu_count: int
    tier: base.Tier
    region: str
    hourly_price: float | None = None
    capacity: int | None = None  # max concurrent live instances; None = unlimited
    provisioning_delay: float = 0.0  # seconds from PROVISIONING to RUNNING
    instance_type: str = ""

    def key(self) -> tuple[str | None, int, base.Tier, str]:
        return (self.accelerator, self.gpu_count, self.tier, self.region)

    def offering(self, *, available: bool) -> base.Offering:
        return base.Offering(
            accelerator=self.accelerator,
            gpu_count=self.gpu_count,
            tier=self.tier,
            region=self.region,
            hourly_price=self.hourly_price,
            available=available,
            instance_type=self.instance_type,
        )


@dataclass(frozen=True)
class LogScript:
    """What every container prints: `lines` in order (None: endless numbered lines), one
    per `interval` seconds from the moment it runs. `{id}`, `{claim}`, `{container}`, `{n}`
    are filled in. The endless default names the container, except the first app one's."""

    lines: tuple[str, ...] | None = None
    interval: float = 1.0

    def text(self, index: int, instance_id: str, claim: str, container: str = "", primary: bool = True) -> str:
        if self.lines is None:
            named = "" if primary else f" {container}"
            return f"fake instance {instance_id}{named} line {index + 1}"
        return self.lines[index].format(id=instance_id, claim=claim, container=container, n=index + 1)


@dataclass(frozen=True)
class CannedCommand:
    """A scripted exec answer for one program name (e.g. `nvidia-smi`)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


@dataclass(frozen=True)
class SigtermScript:
    """What a container does on SIGTERM (`stop_container`): it exits `seconds` after it with
    `exit_code`; None seconds: it ignores SIGTERM (only the SIGKILL at the grace's end ends
    it, 137). The default dies of the signal at once: 143, as a process without a handler."""

    seconds: float | None = 0.0
    exit_code: int = 143


@dataclass(frozen=True)
class ContainerScript:
    """How long one container runs before it exits on its own (None: until stopped), with
    which code, and what it does on SIGTERM."""

    run_seconds: float | None = None
    exit_code: int = 0
    sigterm: SigtermScript = field(default_factory=SigtermScript)


@dataclass(frozen=True)
class Scenario:
    offerings: tuple[OfferingSpec, ...]
    regions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    poll_interval: float = 1.0
    list_lag: float = 0.0
    termination_delay: float = 0.0  # seconds a terminated instance stays TERMINATING
    # seconds a TERMINATED instance stays listed, output readable, as EC2 keeps terminated
    # instances visible for about an hour; then it is gone
    retention_seconds: float = 3600.0
    run_seconds: float | None = None  # the workload exits on its own after this long RUNNING
    exit_code: int = 0  # ... with this code
    sigterm: SigtermScript = field(default_factory=SigtermScript)  # the workload's app containers on SIGTERM
    init_seconds: float = 1.0  # an init container (not a sidecar) exits 0 after this long
    containers: Mapping[str, ContainerScript] = field(default_factory=dict)  # by container name
    node_capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_CAPACITY))
    log: LogScript = field(default_factory=LogScript)
    commands: Mapping[str, CannedCommand] = field(default_factory=dict)
    usage: UsageScript = field(default_factory=UsageScript)  # what running containers use (providers.fake.usage)
    billing_starts: base.BillingStart = base.BillingStart.CREATED  # the cloud it stands for bills from this fact
    echo_ports: tuple[int, ...] = ()  # `ports: {echo: [...]}`: port-forward echoes bytes back there
    # seconds each call of a method takes before it is served (a slow cloud API), by method
    api_latency: Mapping[str, float] = field(default_factory=dict)
    notices: bool = True  # false: the wire says nothing ahead of an interrupt (seen only after the fact)
    notice_redelivery: float = 30.0  # seconds a delivered, unacked notice is hidden before it comes again
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)  # as written, for GET /v1/scenario

    def script_for(self, name: str, *, init: bool, sidecar: bool) -> ContainerScript:
        """The script of container `name`: its own entry, else an app container's is the
        workload's, an init container's `init_seconds` and exit 0, a sidecar's endless."""
        own = self.containers.get(name)
        if own is not None:
            return own
        if sidecar:
            return _ENDLESS
        if init:
            return ContainerScript(self.init_seconds, 0)
        return ContainerScript(self.run_seconds, self.exit_code, self.sigterm)

    def tiers(self) -> tuple[base.Tier, ...]:
        return tuple(dict.fromkeys(o.tier for o in self.offerings))

    def concrete_regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.region for o in self.offerings))

    def expand_regions(self, declared: list[str] | tuple[str, ...]) -> list[str]:
        """Group tokens (case-insensitive) become their regions; other names pass through."""
        groups = {k.lower(): v for k, v in self.regions.items()}
        result: dict[str, None] = {}
        for token in declared:
            token = token.strip()
            for region in groups.get(token.lower(), (token,)):
                if region:
                    result.setdefault(region, None)
        return list(result)


def load_scenario(source: str | Path | Mapping[str, Any] | None) -> Scenario:
    """A Scenario from a YAML file path, an inline mapping, or None (the default).

    Raises ValueError naming the problem (a missing file included)."""
    if source is None:
        return parse_scenario(DEFAULT_SCENARIO)
    if isinstance(source, Mapping):
        return parse_scenario(source)
    try:
        data = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"fake scenario {str(source)!r} cannot be read: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"fake scenario {str(source)!r} must be a YAML mapping")
    return parse_scenario(data)


def parse_scenario(data: Mapping[str, Any]) -> Scenario:
    """Validate a scenario mapping (the shape is in docs/providers/fake.md)."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"fake scenario: unknown keys {sorted(unknown)}")
    raw_offerings = data.get("offerings", DEFAULT_SCENARIO["offerings"])
    if not isinstance(raw_offerings, list) or not raw_offerings:
        raise ValueError("fake scenario: 'offerings' must be a non-empty list")
    offerings: list[OfferingSpec] = []
    for entry in raw_offerings:
        offerings.extend(_parse_offering(entry))
    regions = data.get("regions") or {}
    if not isinstance(regions, Mapping) or not all(isinstance(v, list) for v in regions.values()):
        raise ValueError("fake scenario: 'regions' maps a group name to a list of regions")
    log = data.get("log") or {}
    commands = (data.get("exec") or {}).get("commands") or {}
    workload = data.get("workload") or {}
    run_seconds = workload.get("run_seconds")
    return Scenario(
        offerings=tuple(offerings),
        regions={str(k): tuple(str(r) for r in v) for k, v in regions.items()},
        poll_interval=_number(data.get("poll_interval", 1.0), "poll_interval", positive=True),
        list_lag=_number(data.get("list_lag", 0.0), "list_lag"),
        termination_delay=_number(data.get("termination_delay", 0.0), "termination_delay"),
        retention_seconds=_number(data.get("retention_seconds", 3600.0), "retention_seconds"),
        run_seconds=None if run_seconds is None else _number(run_seconds, "workload.run_seconds"),
        exit_code=int(workload.get("exit_code", 0)),
        sigterm=_parse_sigterm(workload.get("sigterm"), "workload.sigterm"),
        init_seconds=_number(workload.get("init_seconds", 1.0), "workload.init_seconds"),
        containers=_parse_containers(workload.get("containers") or {}),
        node_capacity={str(k): str(v) for k, v in (data.get("capacity") or DEFAULT_NODE_CAPACITY).items()},
        log=_parse_log(log),
        commands={str(name): _parse_command(spec) for name, spec in commands.items()},
        usage=parse_usage(data.get("usage")),
        billing_starts=_parse_billing_starts(data.get("billing_starts", "Created")),
        echo_ports=_parse_echo_ports(data.get("ports") or {}),
        api_latency=_parse_latency(data.get("api_latency") or {}),
        notices=_parse_flag(data.get("notices", True), "notices"),
        notice_redelivery=_number(data.get("notice_redelivery", 30.0), "notice_redelivery", positive=True),
        raw=copy.deepcopy(dict(data)),
    )


def _parse_billing_starts(value: Any) -> base.BillingStart:
    folded = str(value).strip().lower()
    found = next((start for start in base.BillingStart if start.value.lower() == folded), None)
    if found is None:
        raise ValueError("fake scenario: 'billing_starts' is Created or Started")
    return found


def _parse_echo_ports(ports: Any) -> tuple[int, ...]:
    echo = ports.get("echo") if isinstance(ports, Mapping) else None
    if not isinstance(ports, Mapping) or set(ports) - {"echo"} or not isinstance(echo or [], list):
        raise ValueError("fake scenario: 'ports' is {echo: [port, ...]}")
    if not all(isinstance(p, int) and 0 < p < 65536 for p in echo or []):
        raise ValueError("fake scenario: each 'ports.echo' entry is a port number in 1..65535")
    return tuple(echo or [])


# The cloud's calls, as its call log names them (what `api_latency` may slow).
CALLS = tuple("provision terminate get list restart stop_container offerings logs exec attach notices ack".split())


def _parse_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"fake scenario: '{name}' is true or false")
    return value


def _parse_latency(data: Any) -> dict[str, float]:
    if not isinstance(data, Mapping):
        raise ValueError("fake scenario: 'api_latency' maps a call (e.g. provision) to seconds")
    unknown = sorted(set(data) - set(CALLS))
    if unknown:
        raise ValueError(f"fake scenario: api_latency.{unknown[0]} is not a call (calls: {', '.join(CALLS)})")
    return {str(call): _number(seconds, f"api_latency.{call}") for call, seconds in data.items()}


_ENDLESS = ContainerScript()
_TOP_KEYS = {
    "offerings",
    "regions",
    "poll_interval",
    "list_lag",
    "termination_delay",
    "retention_seconds",
    "workload",
    "capacity",
    "log",
    "exec",
    "usage",
    "ports",
    "api_latency",
    "billing_starts",
    "notices",
    "notice_redelivery",
}


def parse_tier(value: object) -> base.Tier:
    """`Spot` / `OnDemand`, any case, `on-demand` and `on_demand` accepted."""
    text = str(value).replace("-", "").replace("_", "").lower()
    for tier in base.Tier:
        if tier.value.lower() == text:
            return tier
    raise ValueError(f"fake scenario: unknown tier {value!r} (Spot or OnDemand)")


def _parse_offering(entry: Any) -> list[OfferingSpec]:
    if not isinstance(entry, Mapping):
        raise ValueError("fake scenario: each offering is a mapping")
    tiers = entry.get("tiers") or [entry.get("tier", "OnDemand")]
    regions = entry.get("regions") or [entry.get("region", "us-east-1")]
    accelerator = entry.get("accelerator")
    gpu_count = int(entry.get("gpu_count", 0 if accelerator is None else 1))
    capacity = entry.get("capacity")
    specs = []
    for tier_text in tiers:
        tier = parse_tier(tier_text)
        price = entry.get("hourly_price")
        if isinstance(price, Mapping):
            price = price.get(tier.value)
        for region in regions:
            specs.append(
                OfferingSpec(
                    accelerator=str(accelerator).lower() if accelerator is not None else None,
                    gpu_count=gpu_count,
                    tier=tier,
                    region=str(region),
                    hourly_price=None if price is None else float(price),
                    capacity=None if capacity is None else int(capacity),
                    provisioning_delay=_number(entry.get("provisioning_delay", 0.0), "provisioning_delay"),
                    instance_type=str(entry.get("instance_type", "")),
                )
            )
    return specs


def _parse_log(log: Mapping[str, Any]) -> LogScript:
    lines = log.get("lines")
    interval = _number(log.get("interval", 1.0), "log.interval")
    if lines is not None and not isinstance(lines, list):
        raise ValueError("fake scenario: 'log.lines' must be a list of strings")
    for line in lines or ():
        try:
            str(line).format(id="fake-1", claim="claim", container="app", n=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"fake scenario: log line {line!r} may use only {{id}}, {{claim}}, {{container}}, {{n}}"
            ) from exc
    if lines is None and interval <= 0:
        raise ValueError("fake scenario: endless default log lines need 'log.interval' > 0")
    return LogScript(lines=None if lines is None else tuple(str(x) for x in lines), interval=interval)


def _parse_containers(data: Any) -> dict[str, ContainerScript]:
    if not isinstance(data, Mapping):
        raise ValueError("fake scenario: 'workload.containers' maps a container name to its script")
    scripts = {}
    for name, spec in data.items():
        if not isinstance(spec, Mapping) or set(spec) - {"run_seconds", "exit_code", "sigterm"}:
            raise ValueError(f"fake scenario: workload.containers.{name} takes run_seconds, exit_code and sigterm")
        seconds = spec.get("run_seconds")
        scripts[str(name)] = ContainerScript(
            None if seconds is None else _number(seconds, f"workload.containers.{name}.run_seconds"),
            int(spec.get("exit_code", 0)),
            _parse_sigterm(spec.get("sigterm"), f"workload.containers.{name}.sigterm"),
        )
    return scripts


def _parse_sigterm(data: Any, name: str) -> SigtermScript:
    """`ignore`, or `{seconds: N, exit_code: C}` (traps SIGTERM, works N s, exits C; C
    defaults to 143); absent: dies of SIGTERM at once (143)."""
    if data is None:
        return SigtermScript()
    if data == "ignore":
        return SigtermScript(seconds=None)
    if not isinstance(data, Mapping) or set(data) - {"seconds", "exit_code"}:
        raise ValueError(f"fake scenario: {name} is 'ignore' or {{seconds: N, exit_code: C}}")
    return SigtermScript(_number(data.get("seconds", 0), f"{name}.seconds"), int(data.get("exit_code", 143)))


def _parse_command(spec: Any) -> CannedCommand:
    if not isinstance(spec, Mapping):
        raise ValueError("fake scenario: each 'exec.commands' entry is a mapping")
    return CannedCommand(
        stdout=str(spec.get("stdout", "")), stderr=str(spec.get("stderr", "")), exit_code=int(spec.get("exit_code", 0))
    )


def _number(value: Any, name: str, *, positive: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"fake scenario: {name} must be a number, not {value!r}") from exc
    if number < 0 or (positive and number == 0):
        raise ValueError(f"fake scenario: {name} must be {'positive' if positive else 'zero or more'}")
    return number
