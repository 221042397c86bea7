"""How instances ended, per provider, the three causes apart: the observer's bounded memory
(console.ends), the metrics counted under the names it remembers, the dashboard's three lines
per virtual node and the same facts in the REST API's /api/nodes/, through the mirror."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from console import ends, metrics, models, rows, runtime, snapshot
from console import observer as console_observer
from console.mirror import Mirror
from kube import observe
from tests.support.rigs.offline import offline_handler

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)  # the past, whenever the test runs
SUBJECT = observe.Subject("default/train-7f3a", "default-train-7f3a-claim", "i-0abc7f3a")


def test_each_cause_is_counted_apart_per_provider() -> None:
    memory = ends.EndsMemory()
    assert memory.interrupted("gpu-a", "Spot", "SpotInterruption") == ("Spot", "SpotInterruption")
    memory.interrupted("gpu-a", "Spot", "SpotInterruption")
    assert memory.interrupted("gpu-a", "", "Reclaimed") == ("unknown", "Reclaimed")  # tier not reported
    assert memory.failed("gpu-a", "Error") == "Error"
    assert memory.failed("gpu-a", "") == "Failed"
    memory.reachability("gpu-b", False, 4, T0)
    memory.reachability("gpu-b", False, 6, T0 + timedelta(seconds=30))  # still out: since stays, Pods now

    a, b = memory.of("gpu-a"), memory.of("gpu-b")
    assert a.interruptions == {"SpotInterruption": 2, "Reclaimed": 1}
    assert a.interruption_tiers == {"Spot": 2, "unknown": 1}
    assert (a.interrupted, a.failures, a.failed) == (3, {"Error": 1, "Failed": 1}, 2)
    assert (a.unreachable_since, a.unreachable_pods) == (None, 0)
    assert (b.unreachable_since, b.unreachable_pods, b.interrupted, b.failed) == (T0, 6, 0, 0)
    assert [e.provider for e in memory.all()] == ["gpu-a", "gpu-b"]

    memory.reachability("gpu-b", True, 6, T0 + timedelta(minutes=5))
    assert (memory.of("gpu-b").unreachable_since, memory.of("gpu-b").unreachable_pods) == (None, 0)
    memory.reachability("gpu-b", False, 1, T0 + timedelta(minutes=9))  # a new spell starts anew
    assert memory.of("gpu-b").unreachable_since == T0 + timedelta(minutes=9)
    assert memory.of("never-told") == ends.Ends("never-told")
    # What `of` gives is a copy: changing it leaves the memory untouched.
    a.interruptions["SpotInterruption"] = 99  # type: ignore[index]
    assert memory.of("gpu-a").interruptions["SpotInterruption"] == 2


def test_the_memory_is_bounded_in_providers_names_and_name_length() -> None:
    memory = ends.EndsMemory()
    for n in range(ends.MAX_NAMES + 8):
        memory.failed("gpu-a", f"Reason{n}")
    failures = memory.of("gpu-a").failures
    assert len(failures) == ends.MAX_NAMES and sum(failures.values()) == ends.MAX_NAMES + 8
    assert failures[ends.OTHER] == 9 and "Reason0" in failures and f"Reason{ends.MAX_NAMES - 1}" not in failures
    memory.failed("gpu-a", "Reason0")  # a name already held is still counted as itself
    assert memory.of("gpu-a").failures["Reason0"] == 2

    long = "X" * 500
    memory.interrupted(long, long, long)
    (cut,) = [e for e in memory.all() if e.provider.startswith("X")]
    assert cut.provider == "X" * ends.NAME_LENGTH and list(cut.interruptions) == ["X" * ends.NAME_LENGTH]

    for n in range(ends.MAX_PROVIDERS + 10):
        memory.interrupted(f"p{n:03d}", "Spot", "SpotInterruption")
        memory.failed("gpu-a", "Error")  # told again and again: never the one forgotten
    kept = [e.provider for e in memory.all()]
    assert len(kept) == ends.MAX_PROVIDERS and "gpu-a" in kept and "p000" not in kept and "p073" in kept


def sample(family: Any, **labels: str) -> float | None:
    for metric in family.collect():
        for each in metric.samples:
            if each.name.endswith(("_total", "_pods")) and all(each.labels.get(k) == v for k, v in labels.items()):
                return float(each.value)
    return None


def test_the_metrics_are_counted_under_the_names_the_console_shows() -> None:
    provider = f"p-{uuid.uuid4().hex[:8]}"  # the registry is the process's: a name no other test uses
    observer = console_observer.ConsoleObserver(now=lambda: T0)
    observer.interrupted(provider, "Spot", "SpotInterruption", SUBJECT)
    observer.interrupted(provider, "", "Reclaimed", SUBJECT)
    for n in range(ends.MAX_NAMES + 3):
        observer.workload_failed(provider, f"Reason{n}", SUBJECT)
    observer.reachability(provider, False, 4)

    assert sample(metrics.INTERRUPTIONS, provider=provider, tier="Spot", kind="SpotInterruption") == 1
    assert sample(metrics.INTERRUPTIONS, provider=provider, tier="unknown", kind="Reclaimed") == 1
    shown = observer.ends_of(provider).failures
    counted = {r: sample(metrics.WORKLOAD_FAILURES, provider=provider, reason=r) for r in shown}
    assert counted == shown and shown[ends.OTHER] == 4  # no series beyond the names remembered
    assert sample(metrics.WORKLOAD_FAILURES, provider=provider, reason=f"Reason{ends.MAX_NAMES + 2}") is None
    assert sample(metrics.UNREACHABLE_PODS, provider=provider) == 4
    assert observer.ends_of(provider).unreachable_since == T0
    observer.reachability(provider, True, 4)
    assert sample(metrics.UNREACHABLE_PODS, provider=provider) == 0


@pytest.mark.parametrize(
    ("kinds", "tiers", "text"),
    [
        ({}, {}, "none"),
        ({"SpotInterruption": 2, "Reclaimed": 1}, {"Spot": 3}, "3 (SpotInterruption 2, Reclaimed 1) on Spot"),
        ({"ScheduledMaintenance": 1, "SpotInterruption": 2}, {"OnDemand": 1, "Spot": 2},
         "3 (SpotInterruption 2, ScheduledMaintenance 1) on Spot 2, OnDemand 1"),
        ({"Reclaimed": 1}, {"unknown": 1}, "1 (Reclaimed 1)"),
        ({"Other": 5, "Reclaimed": 1}, {"Spot": 6}, "6 (Reclaimed 1, Other 5) on Spot"),
    ],
)  # fmt: skip
def test_the_interrupted_line_counts_by_kind_and_names_the_tier(
    kinds: dict[str, int], tiers: dict[str, int], text: str
) -> None:
    assert ends.interrupted_text(kinds, tiers) == text


def test_the_failed_line_counts_by_reason() -> None:
    assert ends.failed_text({}) == "none"
    assert ends.failed_text({"OOMKilled": 1, "Error": 2}) == "3 (Error 2, OOMKilled 1)"


@pytest.fixture
def told(
    db: Any, fake_provider: Callable[..., Any], installed_runtime: Callable[..., Any]
) -> Iterator[console_observer.ConsoleObserver]:
    """Two virtual nodes; the observer told that gpu-a lost 3 instances (2 spot interruptions, one
    reclaimed) and one workload failed, and that gpu-b has not answered since T0 (4 Pods waiting);
    mirrored once."""
    observer = console_observer.install(console_observer.ConsoleObserver(now=lambda: T0))
    handlers = [offline_handler(fake_provider(name)) for name in ("gpu-a", "gpu-b")]
    installed_runtime(handlers=handlers)
    observer.interrupted("gpu-a", "Spot", "SpotInterruption", SUBJECT)
    observer.interrupted("gpu-a", "Spot", "SpotInterruption", SUBJECT)
    observer.interrupted("gpu-a", "Spot", "Reclaimed", SUBJECT)
    observer.workload_failed("gpu-a", "Error", SUBJECT)
    observer.reachability("gpu-b", False, 4)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    yield observer
    console_observer.uninstall()


def lines(page: str, node: str) -> dict[str, str]:
    """The tile of `node`: each cause's line as a reader sees it (tags dropped, spaces joined)."""
    tile = page[page.index(f'data-node="{node}"') :]
    tile = tile[: tile.index("</section>")]
    found = re.findall(
        r'<li data-cause="(\w+)"><span class="cause">\w+</span> <span class="([^"]*)">(.*?)</span></li>', tile
    )
    return {cause: " ".join(re.sub(r"<[^>]+>", " ", html).split()) + f" [{classes}]" for cause, classes, html in found}


def test_the_dashboard_shows_three_lines_per_virtual_node(told: console_observer.ConsoleObserver) -> None:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    page = client.get("/").content.decode()
    a, b = lines(page, "nebula-gpu-a"), lines(page, "nebula-gpu-b")
    assert a == {
        "interrupted": "3 (SpotInterruption 2, Reclaimed 1) on Spot [v warn]",
        "unreachable": "no [v]",
        "failed": "1 (Error 1) [v error]",
    }
    assert b["interrupted"] == "none [v]" and b["failed"] == "none [v]"
    assert re.fullmatch(
        rf"since {T0:%Y-%m-%d %H:%M:%S} UTC \(1\dm\d*s?\): 4 Pods waiting, none failed \[v error\]", b["unreachable"]
    ), b["unreachable"]
    assert lines(client.get("/dashboard/panels").content.decode(), "nebula-gpu-b") == b  # the refreshed panels too
    for secret in (SUBJECT.pod, SUBJECT.claim, SUBJECT.instance):  # names and counts only reach the page
        assert secret.split("/")[-1] not in page


def test_the_api_and_the_mirror_hold_the_same_ends(told: console_observer.ConsoleObserver) -> None:
    client = APIClient()
    client.force_authenticate(User.objects.create_user("reader"))
    answer = client.get("/api/nodes/")
    assert answer.status_code == 200
    nodes = {n["name"]: n for n in answer.json()["results"]}
    a, b = nodes["nebula-gpu-a"], nodes["nebula-gpu-b"]
    assert a["interruptions"] == {"SpotInterruption": 2, "Reclaimed": 1} and a["interruption_tiers"] == {"Spot": 3}
    assert (a["failures"], a["unreachable_since"], a["unreachable_pods"]) == ({"Error": 1}, None, 0)
    assert (b["unreachable_since"], b["unreachable_pods"], b["interruptions"]) == (f"{T0:%Y-%m-%dT%H:%M:%S}Z", 4, {})
    assert SUBJECT.instance not in answer.content.decode()

    mirrored = models.VirtualNode.objects.get(name="nebula-gpu-b")
    assert (mirrored.unreachable_since, mirrored.unreachable_pods) == (T0, 4)
    for handler in runtime.current().handlers:
        row = rows.node_row(handler, 0, told)
        fields = ("interruptions", "interruption_tiers", "failures", "unreachable_since", "unreachable_pods")
        assert {k: snapshot.fit("nodes", row)[k] for k in fields} == {k: row[k] for k in fields}
        assert models.VirtualNode.objects.filter(name=handler.node_name, **{k: row[k] for k in fields[3:]}).exists()

    told.reachability("gpu-b", True, 0)  # it answers again: the next sync clears the line
    Mirror(runtime.current, observer=lambda: told).sync_once()
    assert models.VirtualNode.objects.get(name="nebula-gpu-b").unreachable_since is None
