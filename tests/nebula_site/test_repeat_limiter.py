"""Repeated warnings during a provider outage are rate-limited (nebula_site.logconfig's
RepeatLimiter, on the LOGGING handler): one line per window per distinct warning, and the
next line says how many were dropped. A table on a hand-moved clock, then a real fake
provider in an outage polled by a real Runner."""

from __future__ import annotations

import io
import logging
import re
import uuid
from collections.abc import Iterator

import pytest

from devcluster import DevCluster
from nebula_site import logconfig
from providers.fake import FakeProvider
from tests.support.clock import ManualClock
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner

SUPPRESSED = re.compile(r"\((\d+) similar warnings? suppressed in the last (\d+)s\)")


def record(
    message: str, *args: object, level: int = logging.WARNING, name: str = "vnode.phases.statussync"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


def test_a_repeat_inside_the_window_is_dropped_and_the_next_line_counts_the_dropped() -> None:
    clock = ManualClock(1000.0)
    limiter = logconfig.RepeatLimiter(60.0, clock=clock)
    failed = "list on %s failed; nothing changes this tick: %s"
    assert limiter.filter(record(failed, "gpu-a", "unreachable"))
    for _ in range(12):
        clock.advance(4.0)
        assert not limiter.filter(record(failed, "gpu-a", "unreachable"))
    assert limiter.pending() == 12
    clock.advance(13.0)  # 61 s after the line that went through
    line = record(failed, "gpu-a", "unreachable")
    assert limiter.filter(line)
    assert line.getMessage() == (
        "list on gpu-a failed; nothing changes this tick: unreachable (12 similar warnings suppressed in the last 61s)"
    )
    assert limiter.pending() == 0
    clock.advance(1.0)
    assert not limiter.filter(record(failed, "gpu-a", "unreachable"))  # a new window began with that line


@pytest.mark.parametrize(
    "other",
    [
        record("list on %s failed; nothing changes this tick: %s", "gpu-b", "unreachable"),  # other arguments
        record("list on %s failed; nothing changes this tick: %s", "gpu-a", "refused"),
        record("list on %s failed; nothing changes this tick: %s", "gpu-a", "unreachable", name="placement.catalog"),
        record("list on %s failed; nothing changes this tick: %s", "gpu-a", "unreachable", level=logging.ERROR),
        record("offerings of %s unavailable; keeping the last answer: %s", "gpu-a", "unreachable"),
    ],
)
def test_a_different_logger_level_template_or_argument_is_another_warning(other: logging.LogRecord) -> None:
    limiter = logconfig.RepeatLimiter(60.0, clock=ManualClock())
    assert limiter.filter(record("list on %s failed; nothing changes this tick: %s", "gpu-a", "unreachable"))
    assert limiter.filter(other)


def test_below_warning_nothing_is_limited_and_the_logging_config_installs_the_limiter() -> None:
    limiter = logconfig.RepeatLimiter(60.0, clock=ManualClock())
    assert all(limiter.filter(record("tick %s", 1, level=logging.INFO)) for _ in range(5))
    config = logconfig.logging_config()
    assert config["handlers"]["console"]["filters"] == ["repeats", "redact"]
    assert config["filters"]["repeats"]["()"] == "nebula_site.logconfig.RepeatLimiter"


def test_hpack_which_logs_every_grpc_header_and_so_the_modal_token_never_logs_at_debug() -> None:
    """Whatever NEBULA_LOG_LEVEL says: the settings' LOGGING (installed in this process by
    Django) keeps hpack above DEBUG."""
    assert logconfig.logging_config("json", "DEBUG")["loggers"]["hpack"]["level"] == "INFO"
    assert not logging.getLogger("hpack").isEnabledFor(logging.DEBUG)


class Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@pytest.fixture
def outage_logs() -> Iterator[tuple[logging.Logger, io.StringIO, Counting, logconfig.RepeatLimiter]]:
    """The status loop's logger, with a limited stream handler (as LOGGING builds it, with a
    one-second window) and an unlimited counter beside it."""
    logger = logging.getLogger("vnode.phases.statussync")
    stream = io.StringIO()
    limiter = logconfig.RepeatLimiter(1.0)
    limited = logging.StreamHandler(stream)
    limited.addFilter(limiter)
    limited.addFilter(logconfig.RedactSecrets())
    counting = Counting()
    logger.addHandler(limited)
    logger.addHandler(counting)
    try:
        yield logger, stream, counting, limiter
    finally:
        logger.removeHandler(limited)
        logger.removeHandler(counting)


def test_a_provider_outage_prints_one_warning_per_window_not_one_per_poll(
    cluster: DevCluster, outage_logs: tuple[logging.Logger, io.StringIO, Counting, logconfig.RepeatLimiter]
) -> None:
    _, stream, counting, limiter = outage_logs
    provider = FakeProvider("outage", {"cloud": f"outage-{uuid.uuid4().hex[:8]}"})
    provider.cloud.outage()
    runner = make_runner(cluster, provider, poll_interval=0.02)
    runner.start()
    try:

        def lines() -> list[str]:
            return [line for line in stream.getvalue().splitlines() if "list on outage failed" in line]

        wait_for(lambda: len(lines()) >= 3, 60, 0.05, what="three windows of the outage")
    finally:
        runner.stop()
    shown = lines()
    reported = [int(m.group(1)) for line in shown if (m := SUPPRESSED.search(line))]
    assert len(reported) == len(shown) - 1  # every line after the first counts what it replaced
    assert counting.count > 2 * len(shown)  # many more failed polls than lines
    assert len(shown) + sum(reported) + limiter.pending() == counting.count  # none lost, none twice
