"""The workload's exit code, read from the serial console of a finished instance and cached.

Called by `inventory` for owned instances that are shutting down, stopping, stopped or
terminated. User-data writes `NEBULA-EXIT-CODE=<n>` on a line of its own to the console
(`userdata.EXIT_MARKER`) before it shuts the machine down; the workload's own lines carry a
Docker timestamp first, so they cannot fake it. The console of a running instance is read
only when its tags name several containers (`status.has_containers`): then on every look,
for the containers' `NEBULA-CONTAINER` markers (`containers.events_in`), since EC2 shows the
machine running from the first init container to the last app container's exit; and that
of a running instance whose workload was asked to stop (`watch`) until its marker shows
(EC2 shows it running until the user-data's shutdown, a minute later).

EC2 posts the buffered console shortly after each state transition and keeps it for at least
an hour after the last post: a console read while the instance was still shutting down may
predate the marker. So a verdict with the marker is final; one without it is read once more
when the instance reaches its final state (stopped or terminated). At most two reads per
instance, usually one; `keep_only` drops the ids a list no longer shows.

Invariant: a list of N finished instances costs console reads only for the ones not seen
before: tests/providers/aws/test_aws_exits.py::test_the_console_is_read_once_per_instance_across_lists.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from providers import base
from providers.aws import containers, logs
from providers.aws.ec2 import Ec2
from providers.aws.status import (
    FINAL_STATES,
    FINISHED_STATES,
    ConsoleVerdict,
    has_containers,
    instance_id,
    state_of,
)
from providers.aws.userdata import EXIT_MARKER
from providers.errors import NotFound, ProviderError, Unavailable

logger = logging.getLogger(__name__)

_MARKER = re.compile(rb"^" + re.escape(EXIT_MARKER.encode()) + rb"=(\d{1,3})\r?$", re.MULTILINE)
_PARALLEL_READS = 8


def exit_code_in(output: bytes) -> int | None:
    """The code of the last marker line in console output, or None if there is none."""
    found = _MARKER.findall(output)
    return int(found[-1]) if found else None


def needs_read(cached: ConsoleVerdict | None, state: str, *, several: bool = False, watched: bool = False) -> bool:
    """Pure: whether an instance in EC2 state `state` needs (another) console read.
    `several`: it runs several containers, so a running one is read on every look;
    `watched`: its workload was asked to stop, so a running one is read until its marker shows."""
    if several and state == "running":
        return True
    if watched and state == "running":
        return cached is None or cached.exit_code is None
    if state not in FINISHED_STATES:
        return False
    if cached is None:
        return True
    if cached.exit_code is not None or cached.state in FINAL_STATES:
        return False
    return state != cached.state


class ExitReader:
    """Console verdicts by instance id. Safe for concurrent use (two racing calls may read
    one console twice; nothing worse)."""

    def __init__(self, ec2: Ec2, *, now: Callable[[], datetime]) -> None:
        self._ec2 = ec2
        self._now = now
        self._lock = threading.Lock()
        self._verdicts: dict[base.InstanceId, ConsoleVerdict] = {}
        self._watched: set[base.InstanceId] = set()

    def watch(self, instance_id: base.InstanceId) -> None:
        """Read this instance's console while it runs too, until its exit marker shows: its
        workload was asked to stop (`stop_container`), and EC2 shows the machine running
        until the user-data's shutdown, a minute after the workload ended."""
        with self._lock:
            self._watched.add(instance_id)

    def verdicts(self, region: str, instances: Sequence[dict[str, Any]]) -> dict[base.InstanceId, ConsoleVerdict]:
        """Verdicts for the finished ones among `instances` (DescribeInstances entries of one
        region), reading the consoles that need it, a few at a time. A console EC2 could not
        serve now (`Unavailable`) has no verdict yet: the instance reads as still going."""
        with self._lock:
            known = {instance_id(region, str(d["InstanceId"])): d for d in instances}
            due = [
                d
                for key, d in known.items()
                if needs_read(
                    self._verdicts.get(key), state_of(d), several=has_containers(d), watched=key in self._watched
                )
            ]
        if len(due) > 1:
            with ThreadPoolExecutor(max_workers=min(len(due), _PARALLEL_READS)) as pool:
                list(pool.map(lambda data: self._read(region, data), due))
        elif due:
            self._read(region, due[0])
        with self._lock:
            return {
                key: verdict
                for key, data in known.items()
                if _read_state(data, watched=key in self._watched) and (verdict := self._verdicts.get(key)) is not None
            }

    def keep_only(self, region: str, listed: Iterable[base.InstanceId]) -> None:
        """Forget the verdicts of `region`'s instances that are not in `listed` (a full list)."""
        keep = set(listed)
        prefix = f"{region}/"
        with self._lock:
            for key in [k for k in self._verdicts if k.startswith(prefix) and k not in keep]:
                del self._verdicts[key]
            self._watched -= {k for k in self._watched if k.startswith(prefix) and k not in keep}

    def __len__(self) -> int:
        with self._lock:
            return len(self._verdicts)

    def _read(self, region: str, data: dict[str, Any]) -> None:
        ec2_id = str(data["InstanceId"])
        state = state_of(data)
        try:
            # Latest: a running (Nitro) instance's console as it is now, not its last buffered post.
            latest: dict[str, Any] = {"Latest": True} if state == "running" else {}
            result = self._ec2.call(region, "get_console_output", InstanceId=ec2_id, **latest)
        except NotFound:
            verdict = ConsoleVerdict(None, state, self._now())
        except Unavailable as exc:
            logger.info("console of %s not readable yet: %s", ec2_id, exc)
            return
        except ProviderError as exc:
            verdict = ConsoleVerdict(None, state, self._now(), note=f"serial console unreadable: {exc}")
        else:
            output = logs.decode_console(result.get("Output"))
            events = containers.events_in(output) if has_containers(data) else {}
            verdict = ConsoleVerdict(exit_code_in(output), state, self._now(), events=events)
        with self._lock:
            self._verdicts[instance_id(region, ec2_id)] = verdict


def _read_state(data: dict[str, Any], *, watched: bool = False) -> bool:
    """The instance is in a state whose console verdict counts (finished, or running several
    containers or a watched workload)."""
    state = state_of(data)
    return state in FINISHED_STATES or (state == "running" and (has_containers(data) or watched))
