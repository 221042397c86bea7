"""containerLogs query parameters, validated the way the kubelet validates them.

Pure: `parse_log_options(query, now=...)` returns the provider's `LogOptions` or raises
`InvalidParameter` (answered 400 with a metav1.Status). `honoured_by` drops what a
provider cannot honour and names it, for the response header.
Tests: tests/vnode/kubelet/test_kubelet_params.py.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta
from urllib.parse import parse_qsl

from providers.base import LogOptions

MAX_QUERY = 8192  # I7: the longest legitimate query is well under 200 bytes
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class InvalidParameter(ValueError):
    """A query value the kubelet would refuse with 400."""


def parse_bool(name: str, text: str) -> bool:
    """Go's strconv.ParseBool, which is what the kubelet uses for these flags."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidParameter(f'could not parse "{name}": strconv.ParseBool: parsing {text!r}: invalid syntax')


def parse_int(name: str, text: str) -> int:
    """Go's strconv.ParseInt(text, 10, 64) as to syntax: an optional sign, then ASCII digits
    only (Python's int() also takes other scripts' digits, such as Arabic-Indic)."""
    try:
        if _DECIMAL.fullmatch(text) is None:
            raise ValueError
        return int(text)
    except ValueError:
        raise InvalidParameter(
            f'could not parse "{name}": strconv.ParseInt: parsing {text!r}: invalid syntax'
        ) from None


def parse_time(name: str, text: str) -> datetime:
    """RFC 3339 with an offset (fractional seconds allowed)."""
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise InvalidParameter(f'could not parse "{name}": {text!r} is not an RFC 3339 time') from None
    if moment.tzinfo is None:
        raise InvalidParameter(f'could not parse "{name}": {text!r} has no time zone offset')
    return moment


def query_values(query_string: str) -> dict[str, str]:
    """The first value of each parameter; empty values count as absent."""
    if len(query_string) > MAX_QUERY:
        raise InvalidParameter(f"query longer than {MAX_QUERY} bytes")
    values: dict[str, str] = {}
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        if value and name not in values:
            values[name] = value
    return values


def parse_log_options(query_string: str, *, now: datetime) -> LogOptions:
    """The validated options, or InvalidParameter. Order of checks as in the kubelet."""
    values = query_values(query_string)
    tail: int | None = None
    if "tailLines" in values:
        tail = parse_int("tailLines", values["tailLines"])
        if tail < 0:
            raise InvalidParameter(f'"tailLines" is {tail}: must be 0 or more')
    elif "tail" in values and values["tail"] != "all":  # the kubelet's legacy alias
        tail = parse_int("tail", values["tail"])
        if tail < 0:
            raise InvalidParameter(f'"tail" is {tail}: must be 0 or more')
    limit: int | None = None
    if "limitBytes" in values:
        limit = parse_int("limitBytes", values["limitBytes"])
        if limit < 1:
            raise InvalidParameter(f'"limitBytes" is {limit}: must be 1 or more')
    since: datetime | None = None
    if "sinceSeconds" in values:
        seconds = parse_int("sinceSeconds", values["sinceSeconds"])
        if seconds < 1:
            raise InvalidParameter(f'"sinceSeconds" is {seconds}: must be 1 or more')
        try:
            since = now - timedelta(seconds=seconds)
        except OverflowError:  # I7: past datetime's range (year 1); no log is that old
            raise InvalidParameter(f'"sinceSeconds" is {seconds}: too large') from None
    if "sinceTime" in values:
        if since is not None:
            raise InvalidParameter('both "sinceSeconds" and "sinceTime" are set')
        since = parse_time("sinceTime", values["sinceTime"])
    stream = values.get("stream", "All")
    if stream not in ("All", "Stdout", "Stderr"):
        raise InvalidParameter(f'"stream" is {stream!r}: must be Stdout, Stderr or All')
    if stream != "All":
        # Providers merge stdout and stderr at the source: one stream cannot be told apart.
        raise InvalidParameter(f'"stream={stream}" is not supported: this node keeps stdout and stderr merged')
    return LogOptions(
        follow=parse_bool("follow", values["follow"]) if "follow" in values else False,
        tail_lines=tail,
        limit_bytes=limit,
        timestamps=parse_bool("timestamps", values["timestamps"]) if "timestamps" in values else False,
        since=since,
        previous=parse_bool("previous", values["previous"]) if "previous" in values else False,
    )


def honoured_by(options: LogOptions, *, stamps_at_source: bool) -> tuple[LogOptions, list[str]]:
    """The options a provider can honour, and the names of those dropped.

    A provider that does not stamp lines at the source cannot add true timestamps or
    filter by time; rather than invent either, we drop them and say so.
    """
    if stamps_at_source:
        return options, []
    dropped = [name for name, asked in (("timestamps", options.timestamps), ("since", options.since)) if asked]
    return replace(options, timestamps=False, since=None), dropped
