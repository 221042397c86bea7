"""The console read at a glance, in headless Chromium at 1,280 x 800 over a busy manager (the
embedded cluster; 40 Pods with long names on one fake cloud, a Pod whose container crashes in a
loop on another, an orphan, blocklist entries, repeated Events): screenshots of the dashboard,
tracked pods, claims and events go to $NEBULA_TEST_ARTIFACTS (default .artifacts/console/), and
on each page no table is wider than its container or the window and no cell wraps inside a word.
A CrashLoopBackOff Pod shows that reason and its restart count, a counted Event is one row."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from console import models, runtime
from console import observer as console_observer
from console.mirror import Mirror
from devcluster import DevCluster
from kube import names, observe
from kube.client import path_for
from placement.blocklist import Blocklist
from providers.base import BlockBreadth, BlockScope, ClaimName, PodSpec, ProvisionRequest, Tier
from providers.fake import FakeProvider
from tests.console.test_console_browser import CHROMEDRIVER, CHROMIUM, FLAGS
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.model.runs import BackoffPolicy
from vnode.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("NEBULA_TEST_ARTIFACTS") or ROOT / ".artifacts") / "console"
WIDTH, HEIGHT = 1280, 800
LONG = "llama-3-70b-instruct-finetune-sweep-lr-3e-4-batch-512-worker"  # 59 characters, no space to break at
PODS = 40
QUICK = BackoffPolicy(initial=0.3, maximum=1.2, reset=600.0)
SCENARIO = {
    "poll_interval": 0.3,
    "offerings": [{"accelerator": None, "gpu_count": 0, "tier": "Spot", "region": "us-east-1", "hourly_price": 0.42}],
}
PAGES = {
    "dashboard": "/",
    "tracked-pods": "/admin/console/trackedpod/",
    "claims": "/admin/console/instanceclaim/",
    "events": "/admin/console/recentevent/",
}

# Every table and every cell of the page (and each line of a node's tile), measured in the
# browser. A word (a run without a space) broken across two lines has two client rects; one on
# one line, or cut by an ellipsis, has one.
LAYOUT_CHECK = """
const problems = [];
const page = document.documentElement;
if (page.scrollWidth > window.innerWidth) problems.push(`page ${page.scrollWidth}px > window ${window.innerWidth}px`);
for (const table of document.querySelectorAll("table")) {
  const box = table.parentElement;
  if (table.getBoundingClientRect().right > window.innerWidth + 0.5)
    problems.push(`table ${table.id || table.className} ends at ${table.getBoundingClientRect().right}px`);
  if (table.scrollWidth > box.clientWidth + 1)
    problems.push(`table ${table.id || table.className} ${table.scrollWidth}px > its container ${box.clientWidth}px`);
}
for (const tile of document.querySelectorAll(".tile"))
  if (tile.scrollWidth > tile.clientWidth + 1)
    problems.push(`tile ${tile.dataset.node} ${tile.scrollWidth}px > its ${tile.clientWidth}px`);
let words = 0;
for (const cell of document.querySelectorAll("td, th, dd, .ends li")) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      words += 1;
      if (lines.size > 1) problems.push(`"${match[0]}" wraps over ${lines.size} lines in a ${cell.tagName}`);
    }
  }
}
return {problems: problems.slice(0, 20), words: words, tables: document.querySelectorAll("table").length};
"""


class Busy:
    """The manager's memory a busy operator looks at; see the module docstring."""

    def __init__(self, tmp: Path) -> None:
        self.cluster = DevCluster(kubeconfig_path=str(tmp / "kubeconfig"), scheduler_interval=0.05)
        self.cluster.start()
        self.kube = kube_for(self.cluster)
        suffix = uuid.uuid4().hex[:8]
        self.providers = {
            "gpu-a": FakeProvider("gpu-a", {"cloud": f"gpu-a-{suffix}", "scenario": SCENARIO}),
            "gpu-crash": FakeProvider(
                "gpu-crash",
                {
                    "cloud": f"gpu-crash-{suffix}",
                    "scenario": {"workload": {"run_seconds": 0.2, "exit_code": 1}},
                    "restarts_in_place": True,
                },
            ),
        }
        self.blocklist = Blocklist()
        self.observer = console_observer.install()
        self.runners: dict[str, Runner] = {}
        for name, provider in self.providers.items():
            self.runners[name] = make_runner(self.cluster, provider, backoff=QUICK, blocklister=self.blocklist)
            self.runners[name].start()
        runtime.install(handlers=[r.handler for r in self.runners.values()], blocklist=self.blocklist)

    def populate(self) -> None:
        pods = path_for("pods", namespace="default")
        for index in range(PODS):
            annotations = {names.HOURLY_PRICE_ANNOTATION: "0.42", names.CAPACITY_TYPE_ANNOTATION: "Spot"}
            self.kube.create(pods, make_pod(f"{LONG}-{index:03d}", "gpu-a", annotations=annotations))
        self.kube.create(pods, make_pod("crash-loop", "gpu-crash"))
        for region in ("us-east-1", "eu-west-3-long-region-name"):
            scope = BlockScope(
                "gpu-a", BlockBreadth.OFFERING, Tier.SPOT, "h100", region, "NoCapacity: sold out in " + region
            )
            self.blocklist.record("gpu-a", scope, pool="training-pool-with-a-long-name")
        orphan = self.providers["gpu-a"].provision(
            PodSpec(namespace="default", name="ghost", uid=str(uuid.uuid4()), container="main", image="x"),
            ProvisionRequest(claim=ClaimName(f"default-{LONG}-ghost-{uuid.uuid4().hex[:8]}"[:63])),
        )
        self.orphan_id = orphan.instance_id
        # How instances ended, as the vnode tells the observer: gpu-a lost three (one not even
        # reported with a tier), a workload failed; gpu-crash stopped answering with 2 Pods waiting.
        subject = observe.Subject(f"default/{LONG}-000")
        for kind in ("SpotInterruption", "SpotInterruption", "RebalanceRecommendation"):
            self.observer.interrupted("gpu-a", "Spot" if kind != "RebalanceRecommendation" else "", kind, subject)
        self.observer.workload_failed("gpu-a", "OOMKilled", subject)
        self.observer.reachability("gpu-crash", False, 2)
        wait_for(lambda: self.running("nebula-gpu-a") == PODS, timeout=60, what="every Pod on gpu-a Running")
        wait_for(lambda: self.restarts("crash-loop") >= 2, timeout=30, what="the crashing Pod restarted twice")

    def running(self, node: str) -> int:
        items = self.kube.get(path_for("pods", namespace="default"))["items"]
        return sum(
            1 for p in items if p["spec"].get("nodeName") == node and p.get("status", {}).get("phase") == "Running"
        )

    def restarts(self, name: str) -> int:
        pod = self.kube.get(path_for("pods", namespace="default", name=name))
        return sum(int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])

    def stop(self) -> None:
        for runner in self.runners.values():
            runner.stop(timeout=5)
        runtime.clear()
        console_observer.uninstall()
        self.cluster.stop()


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Busy]:
    running = Busy(tmp_path_factory.mktemp("busy"))
    try:
        running.populate()
        yield running
    finally:
        running.stop()


@pytest.fixture
def mirror(busy: Busy, transactional_db: Any) -> Iterator[Mirror]:
    running = Mirror(observer=lambda: busy.observer, interval=0.3)
    running.start()
    wait_for(lambda: running.syncs >= 1)
    yield running
    running.stop()


@pytest.fixture
def window(tmp_path: Path) -> Iterator[Any]:
    """Chromium whose viewport is 1,280 x 800 CSS pixels."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", f"--window-size={WIDTH},{HEIGHT}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(WIDTH + WIDTH - inner[0], HEIGHT + HEIGHT - inner[1])
        assert driver.execute_script("return [window.innerWidth, window.innerHeight]") == [WIDTH, HEIGHT]
        yield driver
    finally:
        driver.quit()


def log_in(driver: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    User.objects.create_user("operator", password="pw-operator-12345", is_staff=True, is_superuser=True)
    driver.get(f"{base}/admin/login/?next=/")
    driver.find_element(By.NAME, "username").send_keys("operator")
    driver.find_element(By.NAME, "password").send_keys("pw-operator-12345")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(lambda: driver.find_elements(By.ID, "panels"))


def crash_row_shows_its_loop(driver: Any, base: str) -> bool:
    driver.get(f"{base}{PAGES['tracked-pods']}?q=crash-loop")
    cells = driver.execute_script(
        "const row = document.querySelector('#result_list tbody tr');"
        "return row ? [...row.querySelectorAll('td, th')].map(c => c.innerText.trim()) : [];"
    )
    restarts = next((c for c in cells if re.fullmatch(r"[0-9]+( \(.+ ago\))?", c)), "0")
    return "CrashLoopBackOff" in cells and int(restarts.split()[0]) >= 2


def test_every_page_fits_1280_pixels_without_mid_word_wraps(
    busy: Busy, mirror: Mirror, live_server: Any, window: Any
) -> None:
    base = live_server.url
    log_in(window, base)
    wait_for(lambda: models.TrackedPod.objects.filter(status="Running").count() == PODS)
    wait_for(lambda: crash_row_shows_its_loop(window, base), timeout=30, what="CrashLoopBackOff with its restarts")
    assert window.find_elements("css selector", "#result_list span.bad")  # the bad state is marked
    wait_for(lambda: models.RecentEvent.objects.filter(reason=names.EVENT_BACKOFF, count__gt=1).exists())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for page, path in PAGES.items():
        window.get(f"{base}{path}")
        measured = window.execute_script(LAYOUT_CHECK)
        assert window.save_screenshot(str(ARTIFACTS / f"{page}.png"))
        assert measured["tables"] >= 1 and measured["words"] > 50, (page, measured)
        assert measured["problems"] == [], (page, measured["problems"])
    window.get(f"{base}/")  # each virtual node's ends, the three causes apart
    assert (
        cause_line(window, "nebula-gpu-a", "interrupted")
        == "3 (SpotInterruption 2, RebalanceRecommendation 1) on Spot 2, unknown 1"
    )
    assert cause_line(window, "nebula-gpu-a", "failed") == "1 (OOMKilled 1)"
    assert cause_line(window, "nebula-gpu-crash", "unreachable").endswith(": 2 Pods waiting, none failed")
    # The Pod runs for 0.2 s between back-offs (then it reads Running, 1/1, as kubectl shows it).
    wait_for(lambda: dashboard_shows_the_loop(window, base), timeout=30, what="the dashboard's CrashLoopBackOff row")


def cause_line(driver: Any, node: str, cause: str) -> str:
    """The dashboard's line of `node` for one cause of an end, as the window shows it."""
    script = "const line = document.querySelector(`[data-node='${arguments[0]}'] [data-cause='${arguments[1]}'] .v`);"
    return str(driver.execute_script(script + "return line ? line.innerText : '';", node, cause))


def dashboard_shows_the_loop(driver: Any, base: str) -> bool:
    driver.get(f"{base}/")
    line = driver.execute_script(
        "const row = [...document.querySelectorAll('tr.pod-row')].find(r => r.innerText.includes('crash-loop'));"
        "return row ? [...row.cells].map(c => c.innerText.trim()) : [];"
    )
    tile = driver.execute_script("return document.querySelector('section[data-node=\"nebula-gpu-crash\"]').innerText")
    shown = (
        line[1:3] == ["CrashLoopBackOff", "0/1"] and int(line[3].split()[0]) >= 2 and line[0] == "default/crash-loop"
    )
    return shown and "CrashLoopBackOff 1" in tile  # its node's tile counts it, marked


def test_a_counted_event_is_one_row_with_its_count(busy: Busy, mirror: Mirror) -> None:
    """The crashing Pod's BackOff Event repeats; the mirror holds one row for it, its count rising."""
    backoff = {"kind": "Pod", "name": "crash-loop", "reason": names.EVENT_BACKOFF}
    first = wait_for(lambda: models.RecentEvent.objects.filter(**backoff).first())
    wait_for(lambda: models.RecentEvent.objects.get(**backoff).count > first.count, timeout=30, what="a repeat counted")
    assert models.RecentEvent.objects.filter(**backoff).count() == 1
    rows = list(models.RecentEvent.objects.values_list("namespace", "name", "type", "reason", "message"))
    assert len(rows) == len(set(rows))  # no Event is two rows
