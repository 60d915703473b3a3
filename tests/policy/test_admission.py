"""The admission and deadline decisions: accept, shed with a retry hint, refuse as too large; fall back or fail."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadeserve.policy import AdmissionDecision, AdmissionPolicy, DeadlineDecision, on_deadline


def test_verdicts() -> None:
    p = AdmissionPolicy(4, retry_after_s=2.5)
    assert p.decide(4, 0) == AdmissionDecision("accept", 4, 0, 4)
    assert p.decide(1, 4) == AdmissionDecision("shed", 1, 4, 4, 2.5)
    assert p.decide(5, 0) == AdmissionDecision("too_large", 5, 0, 4)
    assert "exceeds the admission capacity of 4" in p.decide(5, 0).reason()
    assert p.decide(1, 4).reason() == "admission queue full (4 of 4 in flight)"
    assert AdmissionPolicy(None).decide(10**9, 10**9).accepted


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdmissionPolicy(0)
    with pytest.raises(ValueError, match="positive"):
        AdmissionPolicy(4, retry_after_s=0)


@given(st.integers(1, 50), st.integers(0, 60), st.integers(1, 60))
def test_accepted_calls_never_exceed_the_capacity_and_too_large_never_fits(cap: int, in_flight: int, n: int) -> None:
    d = AdmissionPolicy(cap).decide(n, min(in_flight, cap))
    assert d.accepted == (min(in_flight, cap) + n <= cap)
    assert (d.verdict == "too_large") == (n > cap)
    assert (d.retry_after_s is not None) == (d.verdict == "shed")


def test_deadline_falls_back_to_the_last_stage_that_ran_or_fails() -> None:
    assert on_deadline(2) == DeadlineDecision(2) and not on_deadline(2).fails
    assert on_deadline(None).fails
