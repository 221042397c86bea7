"""The mirror keeps up: 1,000 tracked Pods churning over two in-memory Handlers (the
fake provider, no API server), while request threads read the same SQLite file (WAL). Every
read sees memory as of the last committed sync's snapshot: no row for a Pod gone before it
began, a row for every Pod in memory since before it. The churn runs for a count of
replacements and syncs, not seconds (how fast the mirror syncs is the bench's to say)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connections
from django.test import Client

from console import models, runtime
from console.mirror import Mirror
from console.observer import ConsoleObserver
from tests.support.polling import wait_for
from tests.support.rigs.offline import KeptEvents, adopt_new_pod, offline_handler
from vnode.handler import Handler
from vnode.phases.teardown import Tombstone

PODS = 1000
REPLACEMENTS = 300  # the churn runs until this many Pods were replaced...
SYNCS = 20  # ...the mirror synced this many times, and the readers read (however long that takes)
PATIENCE = 300.0  # seconds: only a churn or mirror that stopped takes longer
SCENARIO = {
    "poll_interval": 1.0,
    "offerings": [
        {
            "accelerator": None,
            "gpu_count": 0,
            "tier": "OnDemand",
            "region": "us-east-1",
            "hourly_price": 0.1,
            "provisioning_delay": 1.5,
        }
    ],
}


class History:
    """When each Pod entered and left memory (monotonic), as the churn saw it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added: dict[str, float] = {}
        self.removed: dict[str, float] = {}

    def violations(self, in_db: set[str], covered: float, finished: float) -> list[str]:
        """Rows for Pods gone before `covered` (when the snapshot of the last sync committed
        before the read began); Pods missing although they were in memory from before
        `covered` until after the read `finished`."""
        with self.lock:
            added, removed = dict(self.added), dict(self.removed)
        found = []
        for uid in in_db:
            if uid in removed and removed[uid] < covered:
                found.append(f"row for {uid}, gone {covered - removed[uid]:.2f}s before the synced snapshot")
        for uid, at in added.items():
            gone = removed.get(uid)
            if uid not in in_db and at < covered and (gone is None or gone > finished):
                found.append(f"no row for {uid}, in memory {covered - at:.2f}s before the synced snapshot")
        return found


def churn(handlers: list[Handler], history: History, stop: threading.Event) -> None:
    """Replace a random Pod every ~40 ms and poll each Handler once a second (phases move)."""
    rng = random.Random(7)
    serial = PODS
    next_poll = time.monotonic()
    while not stop.is_set():
        handler = rng.choice(handlers)
        entries = handler.tracked_entries()
        if entries:
            victim = rng.choice(entries)
            assert handler.teardown.terminate(Tombstone(victim.key)) is None  # gone at once: the fake stops instantly
            with history.lock:
                history.removed[victim.uid] = time.monotonic()
        pod = adopt_new_pod(handler, f"churn-{serial}")
        serial += 1
        with history.lock:
            history.added[pod["metadata"]["uid"]] = time.monotonic()
        if time.monotonic() >= next_poll:
            for each in handlers:
                each.status_sync.poll_once()
            next_poll += 1.0
        stop.wait(0.04)


def read_rows(mirror: Mirror, history: History, stop: threading.Event, found: list[str], reads: list[int]) -> None:
    try:
        while not stop.is_set():
            covered = mirror.last_snapshot_at  # that sync committed before this read begins
            try:
                in_db = set(models.TrackedPod.objects.values_list("uid", flat=True))
            except OperationalError as exc:
                found.append(f"read failed: {exc}")
                continue
            found.extend(history.violations(in_db, covered, time.monotonic()))
            reads.append(len(in_db))
            stop.wait(0.1)
    finally:
        connections.close_all()


def read_pages(client: Client, stop: threading.Event, found: list[str], reads: list[int]) -> None:
    paths = ["/", "/dashboard/panels", "/admin/console/trackedpod/?phase=Running", "/admin/console/instanceclaim/"]
    try:
        while not stop.is_set():
            for path in paths:
                try:
                    response = client.get(path)
                except OperationalError as exc:
                    found.append(f"{path}: {exc}")
                    continue
                if response.status_code != 200:
                    found.append(f"{path}: HTTP {response.status_code}")
                reads.append(1)
            stop.wait(0.2)
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_mirror_keeps_up_with_1000_churning_pods(
    fake_provider: Callable[..., Any], observer: ConsoleObserver, installed_runtime: Callable[..., Any]
) -> None:
    handlers = [
        offline_handler(fake_provider(name, **SCENARIO), events=KeptEvents()) for name in ("churn-a", "churn-b")
    ]
    history = History()
    for index in range(PODS):
        pod = adopt_new_pod(handlers[index % 2], f"pod-{index}")
        history.added[pod["metadata"]["uid"]] = time.monotonic()
    installed_runtime(handlers=handlers)
    user = User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    mirror = Mirror(runtime.current, observer=lambda: observer, interval=1.0)
    mirror.start()
    stop = threading.Event()
    found: list[str] = []
    row_reads: list[int] = []
    page_reads: list[int] = []
    threads = [threading.Thread(target=churn, args=(handlers, history, stop), name="churn")]
    try:
        deadline = time.monotonic() + 30
        while mirror.syncs < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mirror.syncs >= 1, "the mirror never synced"
        for _ in range(3):
            threads.append(threading.Thread(target=read_rows, args=(mirror, history, stop, found, row_reads)))
        for _ in range(2):
            client = Client()
            client.force_login(user)
            threads.append(threading.Thread(target=read_pages, args=(client, stop, found, page_reads)))
        for thread in threads:
            thread.start()
        first_sync = mirror.syncs
        wait_for(
            lambda: len(history.removed) >= REPLACEMENTS
            and mirror.syncs - first_sync >= SYNCS
            and len(row_reads) > 100
            and len(page_reads) > 20,
            PATIENCE,
            interval=0.2,
            what="the churn's replacements, the mirror's syncs and the readers' reads",
        )
    finally:
        stop.set()
        for thread in threads:
            if thread.ident is not None:
                thread.join(30)
        mirror.stop()
    assert found == [], found[:10]
    assert min(row_reads) >= PODS - 5  # the tracked set stays ~1,000 through the churn
    phases = set(models.TrackedPod.objects.values_list("phase", flat=True))
    assert {"Pending", "Running"} <= phases
