"""The stage-failure rule: a local model's failure is isolated row by row (500 where nothing ran before, 400 for a
request it cannot take); an upstream's failure falls back the whole batch at once (502 for an error or an
unreachable server, 504 for a timeout)."""

from __future__ import annotations

import pytest

from cascadeserve.policy.failure import StageFailureDecision, on_stage_failure


def test_each_kind_of_failure_gets_its_answer() -> None:
    assert on_stage_failure("model") == StageFailureDecision("model", isolate_rows=True, status=500)
    # a prompt the stage cannot take (past its context): the row that fails alone is the client's to fix
    assert on_stage_failure("request") == StageFailureDecision("request", isolate_rows=True, status=400)
    assert on_stage_failure("upstream_error") == StageFailureDecision("upstream_error", isolate_rows=False, status=502)
    timeout = on_stage_failure("upstream_timeout")
    assert (timeout.isolate_rows, timeout.status, timeout.fallback) == (False, 504, True)
    with pytest.raises(ValueError, match="unknown stage failure kind"):
        on_stage_failure("meteor")  # type: ignore[arg-type]
