"""Simulated time: acceleration, the NotBefore mapping, formatting."""

from __future__ import annotations

import pytest

from se_exporter.simulator import ManualClock, SimClock, format_rfc1123

pytestmark = pytest.mark.pure


class FakeTime:
    def __init__(self) -> None:
        self.mono, self.wall = 100.0, 1_700_000_000.0

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def test_sim_clock_runs_speed_times_faster() -> None:
    time = FakeTime()
    clock = SimClock(60, monotonic=lambda: time.mono, wall=lambda: time.wall)
    assert clock.now() == 1_700_000_000.0  # starts at the real wall time by default
    time.advance(2)
    assert clock.now() == 1_700_000_120.0
    assert (clock.real_monotonic(), clock.real_time()) == (102.0, 1_700_000_002.0)


def test_not_before_maps_to_the_real_instant_it_happens_and_does_not_drift() -> None:
    time = FakeTime()
    clock = SimClock(60, monotonic=lambda: time.mono, wall=lambda: time.wall)
    not_before = clock.now() + 900  # 15 simulated minutes away
    first = clock.to_real_time(not_before)
    assert first == 1_700_000_015.0  # 15 real seconds away
    time.advance(7.3)  # a later poll sees the same NotBefore
    assert clock.to_real_time(not_before) == first
    time.advance(7.7)
    assert clock.now() == pytest.approx(not_before)  # the event starts when the real countdown hits zero


def test_explicit_sim_start() -> None:
    time = FakeTime()
    clock = SimClock(2, sim_start=0.0, monotonic=lambda: time.mono, wall=lambda: time.wall)
    time.advance(5)
    assert clock.now() == 10.0
    assert clock.to_real_time(10.0) == 1_700_000_005.0


@pytest.mark.parametrize("speed", [0, -1, float("inf"), float("nan")])
def test_bad_speed(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        SimClock(speed)


def test_manual_clock() -> None:
    clock = ManualClock(start=1000.0, speed=10)
    clock.advance(50)
    assert (clock.now(), clock.real_monotonic(), clock.real_time()) == (1050.0, 5.0, 1005.0)
    assert clock.to_real_time(1100.0) == 1010.0
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


@pytest.mark.parametrize(
    ("unix", "text"),
    [
        (1649716018.0, "Mon, 11 Apr 2022 22:26:58 GMT"),
        (1649716018.999, "Mon, 11 Apr 2022 22:26:58 GMT"),
        (0.0, "Thu, 01 Jan 1970 00:00:00 GMT"),
    ],
)
def test_rfc1123(unix: float, text: str) -> None:
    assert format_rfc1123(unix) == text
