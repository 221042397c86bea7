"""`nebula_site.openfiles`: runvnode's open-files limit, raised to the hard limit, with a warning
when the listener caps could open more than that."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from nebula_site import openfiles
from vnode.kubelet.limits import Limits


@pytest.fixture
def restored_limit() -> Iterator[tuple[int, int]]:
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        yield saved
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, saved)


def test_the_soft_open_files_limit_is_raised_to_the_hard_one(restored_limit: tuple[int, int]) -> None:
    hard = restored_limit[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    assert openfiles.raise_to_hard(Limits()) == hard
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)


def test_a_limit_below_what_the_caps_can_open_is_warned_with_the_settings_to_change(
    restored_limit: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    hard = restored_limit[1]
    huge = Limits.from_mapping({"authenticated_total": hard + 1})
    with caplog.at_level(logging.WARNING, logger="nebula_site.openfiles"):
        openfiles.raise_to_hard(huge)
    [record] = caplog.records
    assert str(openfiles.needed(huge)) in record.getMessage()
    assert "authenticated_total" in record.getMessage()


def test_caps_within_the_limit_say_nothing(restored_limit: tuple[int, int], caplog: pytest.LogCaptureFixture) -> None:
    small = Limits.from_mapping({"total": 16, "authenticated_total": 16, "forwards_total": 16})
    if restored_limit[1] < openfiles.needed(small):
        pytest.skip("this machine's hard open-files limit is below 1,072")
    with caplog.at_level(logging.WARNING, logger="nebula_site.openfiles"):
        openfiles.raise_to_hard(small)
    assert caplog.records == []
