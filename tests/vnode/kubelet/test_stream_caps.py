"""The process-wide stream caps' arithmetic (vnode/kubelet/streamcaps.py); the streams that
take places are driven past their caps in test_port_forward.py, test_exec_caps.py and
test_listeners.py."""

from __future__ import annotations

import threading

import pytest

from vnode.kubelet.limits import Limits
from vnode.kubelet.streamcaps import Gauge, StreamCaps


def test_I7_a_gauge_refuses_past_its_cap_and_takes_again_once_a_place_is_given_back() -> None:
    gauge = Gauge("log streams", 2, "followers_total")
    assert gauge.take() and gauge.take()
    assert not gauge.take()
    assert (gauge.open, gauge.refused) == (2, 1)
    gauge.give()
    assert gauge.take()
    assert gauge.open == 2


def test_a_refusal_names_the_cap_and_the_setting_that_raises_it() -> None:
    text = Gauge("exec and attach sessions", 256, "sessions_total").refusal()
    assert "256 exec and attach sessions" in text
    assert "LISTENER_LIMITS['sessions_total']" in text


def test_a_place_given_back_that_was_never_taken_is_an_error_not_a_silent_negative() -> None:
    gauge = Gauge("forwarded connections", 1, "forwards_total")
    with pytest.raises(RuntimeError, match="never taken"):
        gauge.give()
    assert gauge.open == 0


def test_I7_threads_racing_for_the_last_places_never_take_more_than_the_cap() -> None:
    gauge = Gauge("forwarded connections", 100, "forwards_total")
    taken: list[bool] = []
    start = threading.Barrier(8)

    def grab() -> None:
        start.wait()
        taken.extend(gauge.take() for _ in range(50))

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert taken.count(True) == 100 and gauge.open == 100
    assert gauge.refused == 300


def test_the_caps_come_from_the_listener_limits_and_a_bad_one_is_refused() -> None:
    caps = StreamCaps.from_limits(Limits.from_mapping({"forwards_total": 8, "followers_total": 3}))
    assert (caps.forwards.cap, caps.followers.cap, caps.sessions.cap) == (8, 3, Limits().sessions_total)
    with pytest.raises(ValueError, match="sessions_total"):
        Limits.from_mapping({"sessions_total": 0})
