"""kube/times.py's tolerant reader: a timestamp in either form to epoch seconds, None for what is none."""

from __future__ import annotations

from typing import Any

import pytest

from kube.times import epoch_of


@pytest.mark.parametrize(
    ("text", "epoch"),
    [("2026-12-05T12:00:00Z", 1796472000.0), ("2026-12-05T12:00:00.500000Z", 1796472000.5),
     ("2026-12-05T13:00:00+01:00", 1796472000.0), ("2026-12-05T12:00:00", 1796472000.0),
     ("", None), ("  ", None), ("yesterday", None), (None, None), (7, None)],
)  # fmt: skip
def test_epoch_of_reads_either_form_and_none_for_what_is_no_timestamp(text: Any, epoch: float | None) -> None:
    assert epoch_of(text) == epoch
