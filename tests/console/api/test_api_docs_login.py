"""/api/docs/ over real HTTP: a browser without a session (Accept: text/html) is sent to the
login page with `?next=/api/docs/` and, once logged in, lands on the docs; an API client
without credentials still gets 401; OPTIONS answers the allowed methods (it was a 500)."""

from __future__ import annotations

import re
from typing import Any

import requests
from django.contrib.auth.models import User
from django.test import Client

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_a_browser_without_a_session_is_sent_to_the_login(live_server: Any, transactional_db: Any) -> None:
    User.objects.create_user("reader", password="pw-reader-12345", is_staff=True)
    session = requests.Session()
    first = session.get(f"{live_server.url}/api/docs/", headers=BROWSER, allow_redirects=False, timeout=30)
    assert first.status_code == 302, first.text[:200]
    assert first.headers["Location"] == "/admin/login/?next=/api/docs/"
    login = session.get(f"{live_server.url}{first.headers['Location']}", headers=BROWSER, timeout=30)
    assert login.status_code == 200 and 'name="username"' in login.text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
    assert token is not None
    form = {"csrfmiddlewaretoken": token.group(1), "username": "reader", "password": "pw-reader-12345"}
    form["next"] = "/api/docs/"
    landed = session.post(login.url, data=form, headers={**BROWSER, "Referer": login.url}, timeout=30)
    assert landed.status_code == 200 and landed.url == f"{live_server.url}/api/docs/"
    assert "swagger-ui" in landed.text


def test_an_api_client_without_credentials_still_gets_401(live_server: Any, transactional_db: Any) -> None:
    # (Accept: application/json is 406, as before: the docs page renders only HTML, and DRF
    # negotiates the content before it checks permissions.)
    for accept in ("*/*", "application/json, */*;q=0.5"):
        answer = requests.get(
            f"{live_server.url}/api/docs/", headers={"Accept": accept}, timeout=30, allow_redirects=False
        )
        assert answer.status_code == 401, (accept, answer.status_code)


def test_options_on_the_docs_answers_the_allowed_methods_and_logs_no_error(db: Any, caplog: Any) -> None:
    client = Client()
    client.force_login(User.objects.create_user("reader", password="pw-reader-12345"))
    with caplog.at_level("ERROR"):
        answer = client.options("/api/docs/")
        anonymous = Client().options("/api/docs/")
    assert answer.status_code == 200, answer.content[:300]
    assert {m.strip() for m in answer.headers["Allow"].split(",")} >= {"GET", "OPTIONS"}
    assert answer.content == b""
    assert anonymous.status_code == 401
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
