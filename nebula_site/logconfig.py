"""Log lines: text by default, one JSON object per line with `NEBULA_LOG_FORMAT=json`, a
filter that redacts anything shaped like a secret before any handler sees it (I4), and one
that keeps a provider outage from printing the same warning every poll (`RepeatLimiter`).

`nebula_site.settings` takes its LOGGING dict from `logging_config()`. A line names the Pod,
claim and instance when the caller passes them (`extra={"pod": ..., "claim": ..., "instance": ...}`,
as `console.observer` does). Must never import Django models: settings load this module.
Tests: tests/console/test_console_units.py, tests/nebula_site/test_repeat_limiter.py.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

REDACTED = "[redacted]"
SUBJECT_FIELDS = ("provider", "node", "pod", "claim", "instance", "outcome")

# key=value / "key": "value" where the key names a secret; Authorization headers; PEM private
# keys; AWS access key ids; URLs with a password in them. What a provider or library might
# print; our own code never logs secret values in the first place.
_SECRET_WORDS = r"password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|authorization"
_SECRET_KEY = rf"[\w.-]*(?:{_SECRET_WORDS})[\w.-]*"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.DOTALL),
        REDACTED,
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    (re.compile(rf"(?i)([\"']?{_SECRET_KEY}[\"']?\s*[:=]\s*[\"']?)([^\s\"',;}}]+)"), rf"\1{REDACTED}"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@"), rf"\1{REDACTED}@"),
)


def redact(text: str) -> str:
    """`text` with every secret-shaped value replaced."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactSecrets(logging.Filter):
    """Renders the message once, redacted, so no formatter or handler sees the raw values."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        for name in SUBJECT_FIELDS:
            value = record.__dict__.get(name)
            if isinstance(value, str):
                record.__dict__[name] = redact(value)
        return True


REPEAT_WINDOW = 60.0  # seconds a repeated warning stays quiet


@dataclass
class _Seen:
    since: float  # when this warning was last let through
    suppressed: int = 0


class RepeatLimiter(logging.Filter):
    """Lets a warning (or worse) through once per `window` seconds: a repeat with the same
    logger, level, message template and arguments inside the window is dropped and counted,
    and the next one let through says how many were ("... (12 similar warnings suppressed in
    the last 60s)"). Below `level` everything passes. The clock is injected for tests."""

    MAX_KEYS = 4096  # distinct warnings remembered; older ones are forgotten beyond that

    def __init__(
        self,
        window: float = REPEAT_WINDOW,
        *,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.window, self.level, self._clock = window, level, clock
        self._seen: dict[tuple[str, int, str, tuple[str, ...]], _Seen] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        key = (record.name, record.levelno, str(record.msg), tuple(str(a) for a in args))
        with self._lock:
            now = self._clock()
            seen = self._seen.get(key)
            if seen is not None and now - seen.since < self.window:
                seen.suppressed += 1
                return False
            if seen is None and len(self._seen) >= self.MAX_KEYS:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = _Seen(since=now)
        if seen is not None and seen.suppressed:
            plural = "s" if seen.suppressed > 1 else ""
            note = f"({seen.suppressed} similar warning{plural} suppressed in the last {now - seen.since:.0f}s)"
            record.msg = f"{record.msg} {note}"
        return True

    def pending(self) -> int:
        """Repeats dropped and not yet reported by a later line."""
        with self._lock:
            return sum(seen.suppressed for seen in self._seen.values())


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the subject fields present."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in SUBJECT_FIELDS:
            value = record.__dict__.get(name)
            if value not in (None, ""):
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic line, with `pod=... claim=... instance=...` appended when known."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        named = [f"{n}={record.__dict__[n]}" for n in SUBJECT_FIELDS if record.__dict__.get(n) not in (None, "")]
        return f"{text} [{' '.join(named)}]" if named else text


QUIET_LIBRARIES = ("hpack",)


def logging_config(fmt: str = "text", level: str = "INFO") -> dict[str, Any]:
    """The LOGGING dict for settings: one stream handler, the repeat limiter and the redaction
    filter on it (on the handler, not a logger, so every logger's records pass through them)."""
    formatter = "json" if fmt.strip().lower() == "json" else "text"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "repeats": {"()": "nebula_site.logconfig.RepeatLimiter"},
            "redact": {"()": "nebula_site.logconfig.RedactSecrets"},
        },
        "formatters": {
            "text": {"()": "nebula_site.logconfig.TextFormatter"},
            "json": {"()": "nebula_site.logconfig.JsonFormatter"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": formatter, "filters": ["repeats", "redact"]},
        },
        "root": {"handlers": ["console"], "level": level},
        # Libraries that log credentials at DEBUG: hpack (under grpclib, the Modal SDK's gRPC)
        # logs every header it encodes, the Modal token among them. Kept above DEBUG whatever
        # the level, so NEBULA_LOG_LEVEL=DEBUG never prints a token.
        "loggers": {name: {"level": "INFO"} for name in QUIET_LIBRARIES},
    }
