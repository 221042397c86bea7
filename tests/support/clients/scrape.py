"""Scraping for tests: GET a metrics listener as Prometheus does, run `promtool` (Debian's
`prometheus` package, `make system-packages`), and name the metrics a PromQL expression reads.

Used by tests/console (the listener, a scrape of a running manager) and tests/deploy (the
alerts and the dashboard of deploy/monitoring).
"""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
# A metric name in PromQL: an identifier not followed by `(` (a function) and not a label name
# inside braces or a by(...) clause, which `metric_names` strips first.
_IDENT = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def get(url: str, *, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET `url` (a bearer `token` if given); the status and the body, errors included."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make system-packages` installs Debian's prometheus package"
    return found


def check_metrics(exposition: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` on an exposition (stdin), as its docs pipe a scrape to it."""
    return subprocess.run(
        [promtool(), "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60, check=False
    )


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, by/without lists, strings
    and numbers left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expression)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    return {name for name in _IDENT.findall(text) if name not in PROMQL_WORDS and not name.isdigit()} - {"vector"}


def family_of(sample: str, families: Iterable[str]) -> str | None:
    """The family a sample name belongs to (`nebula_provisions_total` -> `nebula_provisions`)."""
    known = set(families)
    if sample in known:
        return sample
    for suffix in _SUFFIXES:
        if sample.endswith(suffix) and sample[: -len(suffix)] in known:
            return sample[: -len(suffix)]
    return None
