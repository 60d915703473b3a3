"""The episode decisions: shedding starts on the first shed after a quiet spell and stops after one, with its count;
the served p95 over the window misses the SLO and meets it again, at most once per window."""

from __future__ import annotations

import math

import pytest

from cascadeserve.policy.episodes import EpisodeSettings, ShedEpisode, ShedWatch, SloWatch


def test_a_shed_starts_an_episode_and_a_quiet_spell_ends_it_with_its_count() -> None:
    w = ShedWatch(quiet_s=5.0)
    assert w.check(0.0, 0) is None
    assert w.check(1.0, 3) == ShedEpisode(True, 1.0, 1.0, 1.0, 3)
    assert w.check(1.1, 10) is None and w.active  # more sheds: the same episode
    assert w.check(4.0, 10) is None  # quiet for 2.9 s: not yet
    assert w.check(6.1, 12) is None  # a shed again: the quiet spell starts over
    assert w.check(11.0, 12) is None and w.active
    stopped = w.check(11.1, 12)
    assert stopped == ShedEpisode(False, 11.1, 1.0, 6.1, 12) and not w.active
    assert w.check(12.0, 13) == ShedEpisode(True, 12.0, 12.0, 12.0, 1)  # a new episode counts afresh


def test_sheds_that_flap_faster_than_the_quiet_spell_start_one_episode() -> None:
    w = ShedWatch(quiet_s=5.0)
    starts = stops = 0
    total = 0
    for k in range(300):  # a shed every 4 s for 30 s, ticks of 0.1 s
        t = k * 0.1
        if k % 40 == 0:
            total += 1
        e = w.check(t, total)
        if e is not None:
            starts += e.started
            stops += not e.started
    assert (starts, stops) == (1, 0)


def _feed(w: SloWatch, t0: float, t1: float, latency_s: float, per_s: int = 50) -> None:
    n = round((t1 - t0) * per_s)
    for i in range(n):
        w.answered(t0 + i / per_s, latency_s)


def test_a_p95_over_the_slo_is_a_miss_and_under_it_is_met_again() -> None:
    w = SloWatch(window_s=10.0, min_answers=20, check_s=1.0)
    _feed(w, 0.0, 5.0, 0.050)
    assert w.check(5.0, 100.0) is None and w.p95_ms == pytest.approx(50.0)
    _feed(w, 5.0, 15.0, 0.200)
    miss = w.check(15.0, 100.0)
    assert miss is not None and miss.missed and miss.p95_ms == pytest.approx(200.0) and miss.slo_ms == 100.0
    assert miss.answers == 500 and w.missed
    _feed(w, 15.0, 30.0, 0.020)
    met = w.check(30.0, 100.0)
    assert met is not None and not met.missed and met.since == 15.0 and not w.missed


def test_the_state_changes_at_most_once_per_window() -> None:
    w = SloWatch(window_s=10.0, min_answers=1, check_s=1.0)
    w.answered(0.0, 0.5)
    assert w.check(0.0, 100.0) is not None  # missed at 0
    w2 = SloWatch(window_s=1.0)  # the window itself is the answers' horizon: old ones leave it
    assert w2.check(0.0, None) is None and w2.p95_ms is None
    # the slow answer has left the window at 10.5, but the miss was said at 0: met only from 10 on, checked each 1 s
    for t in (1.0, 2.0, 5.0, 9.0):
        assert w.check(t + 0.5, 100.0) is None and w.missed
    met = w.check(10.5, 100.0)
    assert met is not None and not met.missed and math.isnan(met.p95_ms)  # no answer in the window: nothing waited


def test_too_few_answers_never_miss_and_no_slo_never_decides() -> None:
    w = SloWatch(window_s=10.0, min_answers=20)
    _feed(w, 0.0, 0.3, 1.0)  # 15 slow answers
    assert w.check(1.0, 100.0) is None and w.p95_ms == pytest.approx(1000.0)
    _feed(w, 1.0, 1.2, 1.0)
    assert w.check(1.5, None) is None  # no SLO: measured, never judged
    assert w.check(2.5, 100.0) is not None


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="shed_quiet_s"):
        EpisodeSettings(shed_quiet_s=0.0)
    with pytest.raises(ValueError, match="slo_min_answers"):
        EpisodeSettings(slo_min_answers=0)
