"""How a mirror value reads in a table cell, on the admin's lists and the dashboard alike:
kubectl's STATUS marked only when it is a bad state, ages as kubectl prints them, long names
cut in the middle with the whole name in a tooltip, free text that wraps only at its spaces.

Called by `console.admin` (list columns) and the dashboard's template tags
(`console.templatetags.cells`). Pure formatting of values already in the mirror; never reads
memory, a provider or the API.
Tests: tests/console/test_console_units.py::test_only_bad_pod_states_are_marked.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.utils.html import format_html, format_html_join

from kube import podstatus

# kubectl STATUS words of a Pod on its way or done well: shown plain. Anything else (CrashLoopBackOff,
# ErrImagePull, Error, OOMKilled, Failed, Unknown, Init:Error, ExitCode:1, ...) is marked.
HEALTHY = frozenset(
    {
        "Pending",
        "Running",
        "Succeeded",
        "Completed",
        "ContainerCreating",
        "PodInitializing",
        "Terminating",
        "SchedulingGated",
    }
)
INIT_PROGRESS = re.compile(r"Init:[0-9]+/[0-9]+")
NAME_WIDTH = 40  # characters of a Pod or claim name shown before the cut


def is_bad(status: str) -> bool:
    """True for a STATUS an operator must look at (see HEALTHY)."""
    return bool(status) and status not in HEALTHY and not INIT_PROGRESS.fullmatch(status)


def status_cell(status: str) -> str:
    """The STATUS as HTML: plain when healthy, `<span class="bad">` otherwise."""
    if is_bad(status):
        return str(format_html('<span class="bad">{}</span>', status))
    return str(format_html("{}", status or "-"))


def restarts_text(restarts: int, last_restart: datetime | None, now: datetime) -> str:
    """kubectl's RESTARTS: `0`, or `5 (2m3s ago)`."""
    summary = podstatus.PodSummary("", 0, 0, restarts, last_restart)
    return summary.restarts_text(now)


def age_text(since: datetime | None, now: datetime) -> str:
    """kubectl's AGE (`5m`, `2d3h`); `-` when the time is unknown."""
    return "-" if since is None else podstatus.age(since, now)


def cut(text: str, width: int = NAME_WIDTH) -> str:
    """`text` as HTML, at most `width` characters: a longer one keeps its start and its end (where
    names differ: `...-worker-007`) around an ellipsis, and shows whole in a tooltip."""
    return str(format_html('<span class="cut" title="{}">{}</span>', text, shorten(text, width)))


def shorten(text: str, width: int = NAME_WIDTH) -> str:
    """`text` cut in the middle to `width` characters (a third of them kept from its end)."""
    if len(text) <= width:
        return text
    tail = width // 3
    return f"{text[: width - tail - 1]}…{text[-tail:]}"


def words(text: str) -> str:
    """Free text (a message, a reason) as HTML that wraps only at its spaces: each word is a
    nowrap span, since browsers also break after a hyphen (`eu-west-3`, `crash-loop_default(...)`)."""
    return str(format_html_join(" ", '<span class="w">{}</span>', ((word,) for word in text.split())))
