"""Log lines: text by default, one JSON object per line with `NEBULA_LOG_FORMAT=json`, and a
filter that redacts anything shaped like a secret before any handler sees it (I4).

`nebula_site.settings` takes its LOGGING dict from `logging_config()`. A line names the Pod,
claim and instance when the caller passes them (`extra={"pod": ..., "claim": ..., "instance": ...}`,
as `console.observer` does). Must never import Django models: settings load this module.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

import json
import logging
import re
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


def logging_config(fmt: str = "text", level: str = "INFO") -> dict[str, Any]:
    """The LOGGING dict for settings: one stream handler, the redaction filter on it."""
    formatter = "json" if fmt.strip().lower() == "json" else "text"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": "nebula_site.logconfig.RedactSecrets"}},
        "formatters": {
            "text": {"()": "nebula_site.logconfig.TextFormatter"},
            "json": {"()": "nebula_site.logconfig.JsonFormatter"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": formatter, "filters": ["redact"]},
        },
        "root": {"handlers": ["console"], "level": level},
    }
