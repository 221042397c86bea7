"""I7 for `kubectl debug`: ephemeral containers' kept output is bounded per process
(`vnode.ephemeral.budget`), kept in mapped chunks (`vnode.ephemeral.ring`) whose memory goes back
to the system when dropped, and released when the Pod goes. The containers are real processes
(the local provider's process layer); only the provider around them is a stand-in."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from nebula_site.freedmemory import return_large_frees
from providers import errors
from providers.base import ClaimName, InstanceId, LogOptions, Process, Provider
from providers.local.process import start_process
from tests.support.polling import wait_for
from vnode.ephemeral.budget import FLOOR, MIB, PER_CONTAINER, OutputBudget, check_limit
from vnode.ephemeral.containers import Ephemerals
from vnode.ephemeral.ring import CHUNK, KeptOutput
from vnode.ephemeral.streams import Fanout
from vnode.model.tracking import Tracked

ENV = {"PATH": "/usr/bin:/bin"}


class Exec:
    """An Executor that runs the command for real, as the local provider does."""

    name = "exec"

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        return start_process(list(command), cwd="/", env=ENV, tty=tty, stdin=stdin)


def rss() -> int:
    """This process's resident memory, in bytes."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def writer(name: str, size: int, *, then: str = "") -> dict[str, Any]:
    """An ephemeral container writing `size` bytes of lines, then `done <name>`."""
    script = f"yes 'output of {name}' | head -c {size}; echo; echo done {name}; {then}"
    return {"name": name, "image": "busybox", "command": ["sh", "-c", script]}


def pod_with(containers: list[dict[str, Any]]) -> Tracked:
    spec = {"containers": [{"name": "main", "image": "busybox"}], "ephemeralContainers": containers}
    uid = str(uuid.uuid4())
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": spec, "status": {}}
    entry = Tracked("ns", "p", uid, ClaimName("claim"), pod, instance_id=InstanceId("i-1"))
    entry.desired_status = {"phase": "Running"}
    return entry


def ephemerals_with(budget: OutputBudget) -> Ephemerals:
    return Ephemerals(
        cast(Provider, Exec()),
        now=lambda: datetime.now(UTC),
        changed=lambda key: None,
        pulls_images=lambda: True,
        several_containers=lambda: False,
        budget=budget,
    )


def terminated(ephemerals: Ephemerals, entry: Tracked, count: int) -> bool:
    ephemerals.overlay(entry)
    statuses = (entry.desired_status or {}).get("ephemeralContainerStatuses") or []
    return sum("terminated" in s["state"] for s in statuses) == count


def read_all(ephemerals: Ephemerals, entry: Tracked, name: str, options: LogOptions | None = None) -> bytes:
    reader = ephemerals.logs(entry.key, name, options or LogOptions())
    out = bytearray()
    while chunk := reader.read():
        out += chunk
    return bytes(out)


def test_I7_thirty_debug_containers_with_10_MB_of_output_each_keep_kept_output_within_the_budget() -> None:
    return_large_frees()  # as `runvnode` does first: the provider's pump buffers, freed, leave RSS
    budget = OutputBudget(8 * MIB)
    ephemerals = ephemerals_with(budget)
    size = 10_000_000
    first = [writer(f"dbg-{n}", size) for n in range(29)]
    entry = pod_with(first)
    before = rss()
    ephemerals.sync(entry)  # 29 at once: the running ones are cut too, not only the ended ones
    wait_for(lambda: terminated(ephemerals, entry, 29), 300, 0.2, what="29 debug containers ended")
    entry.pod = {**entry.pod, "spec": {**entry.pod["spec"], "ephemeralContainers": [*first, writer("dbg-29", size)]}}
    ephemerals.sync(entry)  # then the newest
    wait_for(lambda: terminated(ephemerals, entry, 30), 120, 0.2, what="the newest debug container ended")
    grown = rss() - before

    assert budget.peak <= budget.limit and budget.kept() <= budget.limit
    assert grown < budget.limit + 64 * MIB, f"RSS grew by {grown} bytes"
    # The newest one's output is readable: its last 4 MiB, to its last line.
    newest = read_all(ephemerals, entry, "dbg-29")
    assert newest.endswith(b"\ndone dbg-29\n") and PER_CONTAINER - CHUNK <= len(newest) <= PER_CONTAINER
    assert read_all(ephemerals, entry, "dbg-29", LogOptions(tail_lines=1)) == b"done dbg-29\n"
    # Older ones were dropped (those that ended first), each said in an Event and by
    # `kubectl logs` of it; the others still read to their last line.
    dropped = [e for e in entry.events if e[1] == "EphemeralOutputDropped" and "its kept output" in e[2]]
    assert dropped and all(kind == "Warning" for kind, _, _ in dropped)
    assert all(f"within the {8 * MIB} bytes" in m and "(NEBULA['EPHEMERAL_OUTPUT_BUDGET'])" in m for _, _, m in dropped)
    named = {message.split('"')[1] for _, _, message in dropped}
    for n in range(30):
        name = f"dbg-{n}"
        if name in named:
            with pytest.raises(errors.NotFound, match=rf'"{name}": its output \(\d+ bytes\) was dropped'):
                ephemerals.logs(entry.key, name, LogOptions())
        else:
            assert read_all(ephemerals, entry, name, LogOptions(tail_lines=1)) == f"done {name}\n".encode()
    assert len(named) >= 2  # 4 MiB kept of the newest leaves room for at most one more whole one
    # The Pod goes: nothing of it is kept or counted.
    ephemerals.forget(entry.key)
    assert budget.kept() == 0 and budget.members() == 0


def test_I7_the_memory_of_kept_output_goes_back_to_the_system_when_the_pod_goes() -> None:
    budget = OutputBudget(64 * MIB)
    ephemerals = ephemerals_with(budget)
    entry = pod_with([writer(f"dbg-{n}", PER_CONTAINER - CHUNK) for n in range(14)])
    ephemerals.sync(entry)
    wait_for(lambda: terminated(ephemerals, entry, 14), 120, 0.2, what="14 debug containers ended")
    kept = budget.kept()
    assert kept >= 14 * (PER_CONTAINER - CHUNK)
    held = rss()
    ephemerals.forget(entry.key)
    returned = held - rss()
    assert budget.kept() == 0
    assert returned >= kept * 3 // 4, f"{returned} of {kept} bytes went back to the system"


def start_fanout(budget: OutputBudget, command: str) -> tuple[Fanout, list[tuple[int, bool]]]:
    told: list[tuple[int, bool]] = []
    process = start_process(["sh", "-c", command], cwd="/", env=ENV, tty=False, stdin=False)
    fanout = Fanout(
        process,
        tty=False,
        stdin_once=False,
        on_exit=lambda code: None,
        budget=budget,
        on_dropped=lambda lost, whole: told.append((lost, whole)),
    )
    fanout.start()
    return fanout, told


def test_I7_the_output_of_the_container_that_ended_first_is_dropped_first() -> None:
    budget = OutputBudget(MIB)
    fanouts = []
    for n in range(3):
        fanout, told = start_fanout(budget, f"yes {n} | head -c {600 * 1024}")
        wait_for(lambda: fanout.ended, 30)  # noqa: B023 (waited for at once)
        fanouts.append((fanout, told))
    (a, a_told), (b, b_told), (c, c_told) = fanouts
    assert a.gone and b.gone and not c.gone
    assert a_told == [(600 * 1024, True)] and b_told == [(600 * 1024, True)] and c_told == []
    assert budget.kept() == 10 * CHUNK and budget.dropped == 2 * 600 * 1024
    with pytest.raises(errors.NotFound, match=rf"was dropped: the manager keeps at most {MIB} bytes"):
        a.log_reader(follow=False)
    for fanout, _ in fanouts:
        fanout.release()
    assert budget.kept() == 0


def test_I7_running_containers_keep_their_newest_output_at_the_floor_however_many() -> None:
    budget = OutputBudget(MIB)
    script = "yes line-{n} | head -c 307200; echo; echo last-{n}; exec sleep 60"
    running = [start_fanout(budget, script.format(n=n)) for n in range(12)]
    try:

        def written() -> bool:
            return all(
                f.log_reader(follow=False, tail_lines=1).read() == f"last-{n}\n".encode()
                for n, (f, _) in enumerate(running)
            )

        wait_for(written, 60, 0.1, what="every container's last line kept")
        # 12 x 300 KiB is past the 1 MiB limit, with nothing ended to drop: each is cut to the floor.
        assert budget.kept() <= max(budget.limit, 12 * FLOOR)
        for fanout, told in running:
            assert not fanout.ended and not fanout.gone
            assert CHUNK <= len(fanout.log_reader(follow=False).read(1 << 20)) <= FLOOR
            assert len(told) == 1 and told[0][0] > 0 and told[0][1] is False  # said once, not per chunk
    finally:
        for fanout, _ in running:
            fanout.release()
    assert budget.kept() == 0 and budget.members() == 0


def test_the_kept_output_reads_and_tails_across_its_chunks() -> None:
    ring = KeptOutput()
    text = b"".join(b"line %d\n" % n for n in range(40_000)) + b"unfinished"
    for at in range(0, len(text), 5000):
        ring.append(text[at : at + 5000])
    assert ring.held == -(-len(text) // CHUNK) * CHUNK
    assert ring.read(0, len(text))[1] == text and ring.read(CHUNK - 3, 10)[1] == text[CHUNK - 3 : CHUNK + 7]
    for lines in (0, 1, 2, 7000, 40_001, 50_000):
        expected = b"".join(text.splitlines(keepends=True)[-lines:]) if lines else b""
        assert text[ring.tail_start(lines) :] == expected
    assert ring.drop_front(-1) == 0 and ring.drop_front(2) == 2 * CHUNK and ring.start == 2 * CHUNK
    assert ring.read(0, 5) == (2 * CHUNK, text[2 * CHUNK : 2 * CHUNK + 5])
    remaining = ring.held
    assert ring.close() == remaining and ring.read(0, 5)[1] == b"" and ring.held == 0


@pytest.mark.parametrize("limit", [0, MIB - 1, 2 * 1024 * MIB, 64.5 * MIB, True, "64Mi"])
def test_a_bad_budget_is_refused_and_changes_nothing(limit: Any) -> None:
    with pytest.raises(ValueError, match="whole bytes from 1048576 to 1073741824"):
        check_limit(limit)
    budget = OutputBudget(2 * MIB)
    with pytest.raises(ValueError):
        budget.set_limit(limit)
    assert budget.limit == 2 * MIB


def test_a_lowered_budget_drops_ended_output_at_once() -> None:
    budget = OutputBudget(8 * MIB)
    fanout, told = start_fanout(budget, f"yes | head -c {3 * MIB}")
    wait_for(lambda: fanout.ended, 30)
    budget.set_limit(2 * MIB)
    assert fanout.gone and told == [(3 * MIB, True)] and budget.kept() == 0
    fanout.release()


def test_I7_the_setting_sizes_the_one_budget_every_runner_of_the_process_shares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.management.base import CommandError

    from nebula_site.management.commands.runvnode import ephemeral_output_budget
    from nebula_site.manager.config import RunnerOptions
    from nebula_site.manager.runners import process_output_budget
    from vnode.ephemeral import budget as budget_module

    fresh = OutputBudget()
    monkeypatch.setattr(budget_module, "PROCESS_BUDGET", fresh)
    limit = ephemeral_output_budget({"EPHEMERAL_OUTPUT_BUDGET": 16 * MIB})
    assert process_output_budget(RunnerOptions(node_ip=None, kubelet_port=0, ephemeral_output_budget=limit)) is fresh
    assert fresh.limit == 16 * MIB
    assert ephemerals_with(fresh).budget is fresh
    unset = Ephemerals(
        cast(Provider, Exec()),
        now=lambda: datetime.now(UTC),
        changed=lambda key: None,
        pulls_images=lambda: True,
        several_containers=lambda: False,
    )
    assert unset.budget is fresh  # an Ephemerals built without one shares the process's
    with pytest.raises(CommandError, match=r"EPHEMERAL_OUTPUT_BUDGET.*whole bytes from 1048576"):
        ephemeral_output_budget({"EPHEMERAL_OUTPUT_BUDGET": "64Mi"})


def test_I7_a_stopped_runners_ephemeral_processes_end_and_their_output_leaves_the_budget() -> None:
    """`Runner.stop` closes its `Ephemerals` (a provider given to another replica, a shutdown):
    a running debug container's process ends, and nothing of any Pod stays counted."""
    budget = OutputBudget(64 * MIB)
    ephemerals = ephemerals_with(budget)
    ended = pod_with([writer("dbg-ended", 3 * CHUNK)])
    running = pod_with([writer("dbg-running", CHUNK, then="sleep 600")])
    for entry in (ended, running):
        ephemerals.sync(entry)
    wait_for(lambda: terminated(ephemerals, ended, 1), 60, 0.2, what="the first debug container ended")
    wait_for(lambda: budget.members() == 2 and budget.kept() > 0, 60, 0.2, what="both counted")
    ephemerals.close()
    assert budget.members() == 0 and budget.kept() == 0
    with pytest.raises(errors.NotFound):
        ephemerals.logs(running.key, "dbg-running", LogOptions())


def running(ephemerals: Ephemerals, entry: Tracked) -> int:
    ephemerals.overlay(entry)
    statuses = (entry.desired_status or {}).get("ephemeralContainerStatuses") or []
    return sum("running" in s["state"] for s in statuses)


def sleeper(name: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["sleep", "60"]}


def test_I7_debug_containers_past_the_running_cap_are_refused_with_a_reason_and_their_places_come_back() -> None:
    budget = OutputBudget(8 * MIB)
    budget.max_running = 2
    ephemerals = ephemerals_with(budget)
    entry = pod_with([sleeper("one"), sleeper("two"), sleeper("three")])
    try:
        ephemerals.sync(entry)
        wait_for(lambda: terminated(ephemerals, entry, 1), 30, 0.05, what="the third refused")
        statuses = {s["name"]: s["state"] for s in (entry.desired_status or {})["ephemeralContainerStatuses"]}
        refused = statuses["three"]["terminated"]
        assert refused["reason"] == "StartError" and "already runs 2 ephemeral containers" in refused["message"]
        assert any(e[1] == "Failed" and '"three"' in e[2] and "its limit" in e[2] for e in entry.events)
        assert budget.running == 2
        wait_for(lambda: running(ephemerals, entry) == 2, 30, 0.05, what="the two started")
        ephemerals.stop(entry.key)  # the Pod ends: its two processes are killed and give their places back
        wait_for(lambda: budget.running == 0, 30, 0.05, what="places given back")
        later = pod_with([sleeper("four")])
        ephemerals.sync(later)
        wait_for(lambda: budget.running == 1, 30, 0.05, what="a new one admitted")
        ephemerals.forget(later.key)
        wait_for(lambda: budget.running == 0, 30, 0.05, what="given back when its Pod goes")
    finally:
        ephemerals.close()


CHURN = """
import subprocess
import sys
import threading
from tests.vnode.test_ephemeral_budget import rss
from vnode.ephemeral import trim

kept = []

def churn():
    chunks = [bytes(64 * 1024) for _ in range(640)]  # 40 MiB of 64 KiB reads, as a pump makes
    kept.append(bytes(4096))  # allocated after them (malloc's, not pymalloc's): the arena's top stays busy
    del chunks

start = rss()
threads = [threading.Thread(target=churn) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
freed = rss()
print(start, freed, trim.give_back_freed(), rss())
"""


def test_I7_heap_the_pumps_freed_goes_back_to_the_system_when_a_debug_container_ends() -> None:
    """What threads free stays in glibc's arenas (only the top of each is trimmed on its own):
    `trim.give_back_freed`, called as a container's process ends, returns those pages. In a
    fresh interpreter, so that no earlier test's free memory absorbs the churn."""
    ran = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, timeout=120, check=True)
    start, freed, trimmed, after = ran.stdout.split()
    assert trimmed == "True"
    assert int(freed) - int(start) >= 24 * MIB, ran.stdout  # the arenas kept much of the 160 MiB
    assert int(after) - int(start) <= 8 * MIB, ran.stdout  # and gave it back
