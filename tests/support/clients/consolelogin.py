"""Logging in to a running console as a browser does: the admin's form, its CSRF token and
session cookie. Used by the `make run` and API-docs tests, which log in with the dev login
that `runvnode --dev-cluster --demo` prints (`LOGIN_LINE`)."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request

LOGIN_LINE = re.compile(r"Console (https?://127\.0\.0\.1:\d+/): log in as (\S+) / (\S+) \(a local dev login")


def log_in(console: str, user: str, password: str) -> tuple[urllib.request.OpenerDirector, str]:
    """An opener holding the session, and the page the login landed on (the admin's index
    when it worked, the login form again when it did not). `console` ends with '/'."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{console}admin/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None, "the login form has no CSRF token"
    fields = {"csrfmiddlewaretoken": token.group(1), "username": user, "password": password, "next": "/admin/"}
    request = urllib.request.Request(
        f"{console}admin/login/",
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Referer": f"{console}admin/login/"},
    )
    with opener.open(request, timeout=30) as answer:
        return opener, str(answer.geturl())
