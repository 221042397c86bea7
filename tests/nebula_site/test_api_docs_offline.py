"""The API docs page (/api/docs/, Swagger UI) works offline: every script and stylesheet it
loads comes from the console's own origin (drf-spectacular-sidecar's static files, served by
the console process's static handler, nebula_site.asgi), and each answers 200. Driven over
HTTP against a real `runvnode --dev-cluster --demo`, logged in with the dev login it prints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.clients.consolelogin import LOGIN_LINE, log_in
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]


class AssetLinks(HTMLParser):
    """Every `<script src>` and `<link href>` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "run.log"
    argv = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--dev-cluster", "--dev-cluster-addr", "127.0.0.1:0"]
    argv += ["--provider", "fake", "--demo", "--console-addr", "127.0.0.1:0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "KUBERNETES_"))}
    env["NEBULA_DB_PATH"] = str(tmp_path / "console.sqlite3")
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process, log
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(60)


def test_the_api_docs_load_only_same_origin_assets_and_each_answers(
    running: tuple[subprocess.Popen[bytes], Path],
) -> None:
    _, log = running
    line = wait_for(lambda: LOGIN_LINE.search(log.read_text()), 90, 0.1, what="the dev login line")
    console, user, password = line.groups()
    opener, landed = log_in(console, user, password)
    assert landed.endswith("/admin/")
    docs = f"{console}api/docs/"
    with opener.open(docs, timeout=30) as answer:
        assert answer.status == 200
        page = answer.read().decode()
    links = AssetLinks()
    links.feed(page)
    assert any("swagger-ui" in url for url in links.urls), links.urls  # the bundle and its CSS
    origin = urllib.parse.urlsplit(console).netloc
    for url in links.urls:
        absolute = urllib.parse.urljoin(docs, url)
        parts = urllib.parse.urlsplit(absolute)
        assert (parts.scheme, parts.netloc) == ("http", origin), f"{url} is not served by the console"
        with opener.open(absolute, timeout=30) as asset:
            assert asset.status == 200, url
            assert asset.read(), url
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page
