"""The failover decision for requests of a lost server: fall back, retry elsewhere (or on the same replica), fail."""

from __future__ import annotations

from tests.policy.test_tables import ROWS, three_stage_plan

from cascadeserve.policy import PlanTables
from cascadeserve.policy.failover import FailoverDecision, on_server_lost

KW = {"attempt": 0, "retries": 2, "now": 1.0, "deadline": 2.0}


def test_a_request_an_earlier_stage_ran_falls_back_whatever_retries_are_left() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    d = on_server_lost(t, gear=0, replica=1, ran_a_stage=True, **KW)
    assert d == FailoverDecision("fallback")


def test_a_fresh_request_retries_on_the_failover_replica_or_the_same_one() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert on_server_lost(t, gear=0, replica=0, ran_a_stage=False, **KW) == FailoverDecision("retry", 2)
    assert on_server_lost(t, gear=1, replica=2, ran_a_stage=False, **KW) == FailoverDecision("retry", 2)


def test_no_retry_left_or_deadline_passed_fails() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    out = on_server_lost(t, gear=0, replica=0, ran_a_stage=False, attempt=2, retries=2, now=1.0, deadline=2.0)
    late = on_server_lost(t, gear=0, replica=0, ran_a_stage=False, attempt=0, retries=2, now=2.0, deadline=2.0)
    assert out == late == FailoverDecision("fail")
