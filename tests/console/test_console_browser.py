"""The console in headless Chromium against a running manager (embedded cluster, two fake
virtual nodes): log in, the dashboard and every admin list match the cluster, no add, change
or delete control exists, the dashboard refreshes in place; screenshots (docs/images/ with
NEBULA_SCREENSHOTS=1).
Also: no secret reaches a page, the API, a log line or a metric (the series themselves:
tests/console/test_metrics_scrape.py)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client import generate_latest

from console import gauges as _gauges  # noqa: F401  (the memory gauges, as the listener serves them)
from console import metrics, models
from console.mirror import Mirror
from kube.client import path_for
from nebula_site.logconfig import JsonFormatter, TextFormatter
from tests.support.polling import wait_for
from tests.support.rigs.console import KNOWN_SECRET, Scenario

ROOT = Path(__file__).resolve().parents[2]
# Screenshots refresh docs/images/ only when asked (NEBULA_SCREENSHOTS=1), so a test run leaves
# the work tree clean; otherwise they go to a temporary folder and are still taken and checked.
IMAGES = (
    ROOT / "docs" / "images"
    if os.environ.get("NEBULA_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="nebula-screenshots-"))
)
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ADMIN_LISTS = {
    "trackedpod": "console-pods.png",
    "instanceclaim": "console-claims.png",
    "virtualnode": "console-nodes.png",
    "blocklistentry": "console-blocklist.png",
    "recentevent": "console-events.png",
}


@pytest.fixture
def mirror(scenario: Scenario, transactional_db: Any) -> Iterator[Mirror]:
    """A fresh mirror per test (the test database is emptied between tests; a start rebuilds)."""
    running = Mirror(observer=lambda: scenario.observer, interval=0.3)
    running.start()
    wait_for(lambda: running.syncs >= 1)
    yield running
    running.stop()


@pytest.fixture
def staff(transactional_db: Any) -> User:
    return User.objects.create_user("operator", password="pw-operator-12345", is_staff=True, is_superuser=True)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1280,900"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(driver: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/")
    assert "/admin/login/" in driver.current_url  # the dashboard needs a login
    driver.find_element(By.NAME, "username").send_keys("operator")
    driver.find_element(By.NAME, "password").send_keys("pw-operator-12345")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(lambda: driver.find_elements(By.ID, "panels"))


def text_of(driver: Any, css: str) -> str:
    """An element's text, read in one script call: the dashboard's panels are replaced in
    place on every refresh, so an element found first can be gone when its text is read."""
    script = "const found = document.querySelector(arguments[0]); return found ? found.innerText : '';"
    return str(driver.execute_script(script, css))


def assert_no_edit_controls(driver: Any) -> None:
    """No add, change or delete control for a mirror table anywhere on the page (the sidebar
    still offers them for auth's Users and Groups, which are not ours)."""
    from selenium.webdriver.common.by import By

    links = [a.get_attribute("href") or "" for a in driver.find_elements(By.CSS_SELECTOR, "a")]
    ours = [link for link in links if "/admin/console/" in link]
    assert not [link for link in ours if link.endswith(("/add/", "/delete/"))], ours
    controls = "#content select[name=action], #content .deletelink, #content input[name=_save], #content a.addlink"
    assert not driver.find_elements(By.CSS_SELECTOR, controls)


def test_dashboard_and_every_admin_list_match_the_cluster_read_only(
    scenario: Scenario, mirror: Mirror, staff: User, live_server: Any, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base = live_server.url
    log_in(browser, base)
    tile_a = 'section[data-node="nebula-gpu-a"]'

    def dashboard_matches() -> bool:
        browser.get(f"{base}/")
        tile = text_of(browser, tile_a)
        if not tile or not text_of(browser, ".block-row"):
            return False
        running = scenario.phase_counts("nebula-gpu-a").get("Running", 0)
        return f"Running {running}" in tile and "Ready" in tile

    wait_for(dashboard_matches)
    tile_b = text_of(browser, 'section[data-node="nebula-gpu-b"]')
    assert "Not ready" in tile_b and "Unavailable" in tile_b
    assert "Failed 1" in tile_b
    assert "$0.84/h" in text_of(browser, tile_a)  # two running Spot Pods at $0.42
    assert scenario.orphan_id in text_of(browser, "#panels")
    entry = scenario.blocklist.entries()[0]
    block_text = text_of(browser, ".block-row")
    assert "gpu-b" in block_text and " s" in block_text
    assert "ProvisionFailed" in text_of(browser, "#panels")
    assert_no_edit_controls(browser)
    IMAGES.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(IMAGES / "console-dashboard.png"))

    # The panels refresh in place: a new Pod appears without a page load.
    browser.execute_script("window.__noReload = 'still here'")
    scenario.kube.create(path_for("pods", namespace="default"), _pod("train-2"))
    wait_for(
        lambda: f"Running {scenario.phase_counts('nebula-gpu-a').get('Running', 0)}" in text_of(browser, tile_a)
        and scenario.phase_counts("nebula-gpu-a").get("Running") == 3,
        timeout=40,
    )
    assert browser.execute_script("return window.__noReload") == "still here"

    cluster_pods = {p["metadata"]["name"] for n in ("nebula-gpu-a", "nebula-gpu-b") for p in scenario.pods_on(n)}
    instance_ids = {p["metadata"]["annotations"].get("nebula.io/instance-id") for p in scenario.pods_on("nebula-gpu-a")}
    cluster_nodes = {n["metadata"]["name"] for n in scenario.kube.get(path_for("nodes"))["items"]}
    expected = {
        "trackedpod": [f"default/{name}" for name in cluster_pods],
        "instanceclaim": [i for i in instance_ids if i] + [scenario.orphan_id],
        "virtualnode": sorted(cluster_nodes),
        "blocklistentry": [entry.id, "gpu-b"],
        "recentevent": ["ProvisionFailed"],
    }
    for model, image in ADMIN_LISTS.items():

        def listed(model: str = model) -> bool:
            browser.get(f"{base}/admin/console/{model}/")
            return all(text in browser.page_source for text in expected[model])

        wait_for(listed, timeout=20)
        assert_no_edit_controls(browser)
        assert browser.save_screenshot(str(IMAGES / image))
    browser.get(f"{base}/admin/console/trackedpod/?q=train-0")
    browser.find_element(By.LINK_TEXT, "nebula-gpu-a")  # links to the node and the claim
    browser.find_element(By.CSS_SELECTOR, "td.field-instance_link a").click()
    assert "instanceclaim" in browser.current_url
    first = browser.find_element(By.CSS_SELECTOR, "#result_list tbody th a, #result_list tbody td a")
    assert first is not None
    row = models.InstanceClaim.objects.filter(orphan=False).first()
    assert row is not None
    browser.get(f"{base}/admin/console/instanceclaim/{row.pk}/change/")
    assert_no_edit_controls(browser)

    browser.set_window_size(390, 844)  # a phone
    browser.get(f"{base}/")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 400
    assert browser.save_screenshot(str(IMAGES / "console-dashboard-phone.png"))


def _pod(name: str) -> dict[str, Any]:
    from kube import names
    from tests.support.rigs.console import pod

    return pod(name, "gpu-a", **{names.HOURLY_PRICE_ANNOTATION: "0.42", names.CAPACITY_TYPE_ANNOTATION: "Spot"})


def test_dashboard_works_without_javascript(scenario: Scenario, mirror: Mirror, staff: User) -> None:
    client = Client()
    client.force_login(staff)
    page = client.get("/").content.decode()
    assert '<meta http-equiv="refresh"' in page and "<noscript>" in page
    assert 'data-node="nebula-gpu-a"' in page and "Running" in page
    assert client.get("/dashboard/panels").status_code == 200


def test_readyz_reports_the_cluster_reachable(scenario: Scenario, mirror: Mirror) -> None:
    answer = Client().get("/readyz")
    assert answer.status_code == 200, answer.content
    assert json.loads(answer.content)["ready"] is True


def test_no_secret_reaches_a_page_the_api_a_log_line_or_a_metric(
    scenario: Scenario, mirror: Mirror, staff: User
) -> None:
    secrets = [KNOWN_SECRET, *scenario.credentials]
    assert len(secrets) >= 2, "the fake cloud minted no connect credential to look for"
    client = Client()
    client.force_login(staff)
    wait_for(lambda: models.TrackedPod.objects.filter(phase="Running").exists())
    pages = ["/", "/dashboard/panels", "/readyz", "/healthz"]
    pages += [f"/admin/console/{m}/" for m in ADMIN_LISTS]
    pages += [f"/admin/console/trackedpod/{p.pk}/change/" for p in models.TrackedPod.objects.all()]
    pages += [f"/admin/console/instanceclaim/{c.pk}/change/" for c in models.InstanceClaim.objects.all()]
    pages += ["/api/pods/", "/api/claims/", "/api/nodes/", "/api/blocklist/", "/api/pools/"]
    bodies = {path: client.get(path).content.decode() for path in pages}
    bodies["the metrics listener's /metrics"] = generate_latest(metrics.REGISTRY).decode()
    for path, body in bodies.items():
        for secret in secrets:
            assert secret not in body, f"a secret appears in {path}"
    lines = []
    for record in scenario.records.records:
        lines.append(record.getMessage())
        lines.append(TextFormatter().format(record))
        lines.append(JsonFormatter().format(record))
    assert len(lines) > 10
    for line in lines:
        for secret in secrets:
            assert secret not in line
    rows = json.dumps(
        [list(m.objects.values()) for m in (models.TrackedPod, models.InstanceClaim, models.RecentEvent)], default=str
    )
    assert not any(secret in rows for secret in secrets)
