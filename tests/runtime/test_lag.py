"""The event loop's lateness, measured on a real loop, and admission refusing while the loop runs late with a
backlog in flight (policy/admission.py): the loop is stalled on purpose, so the outcome does not depend on the
machine's speed."""

from __future__ import annotations

import asyncio
import time

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import Overloaded, Recorder, RuntimeOptions, emulated_runtime
from cascadeserve.runtime.lag import LoopLag


def test_a_stalled_loop_reads_as_late_until_the_hold_has_passed() -> None:
    async def main() -> tuple[float, float, float, float, float]:
        probe = LoopLag(interval_s=0.005, hold_s=0.05)
        before = probe.lag_s()
        probe.start()
        time.sleep(0.3)  # the loop stalls: the timer due in 5 ms is now ~295 ms late
        stalled = probe.lag_s()
        await asyncio.sleep(0)  # the late timer fires: its lateness is held
        held = probe.lag_s()
        end = time.monotonic() + 60.0  # the hold passes and the timer keeps time again (a busy host: be patient)
        while probe.lag_s() >= 0.25 and time.monotonic() < end:
            await asyncio.sleep(0.01)
        caught_up = probe.lag_s()
        probe.stop()
        return before, stalled, held, caught_up, probe.lag_s()

    before, stalled, held, caught_up, stopped = asyncio.run(main())
    assert before == 0.0 and stalled >= 0.29 and held >= 0.29
    assert 0.0 <= caught_up < 0.25 and stopped == 0.0


def test_admission_sheds_while_the_loop_runs_late_with_a_backlog_and_answers_every_admitted(
    toy_profile: Profile,
) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), max_wait_ms=1.0)
    # 100 QPS and an SLO of 100 ms: a bound of 20 in flight, and the loop may run 50 ms late
    opts = RuntimeOptions(max_in_flight=None, max_wait_slos=2.0, capacity_qps=100.0, slo_ms=100.0)

    async def main() -> tuple[float | None, str, float | None, int, Recorder]:
        rec = Recorder()
        rt = emulated_runtime(toy_profile, plan, observer=rec, options=opts)
        await rt.start()
        backlog = rt.submit(list(range(6)))  # 6 in flight: over a quarter of the bound, and nothing runs yet
        time.sleep(0.3)  # the loop stalls with them in flight
        refusal = rt.shed_now()
        retry = None if refusal is None else refusal.retry_after_s
        try:
            rt.submit([6])
            message = ""
        except Overloaded as e:
            message = str(e)
        await asyncio.gather(*(r.future for r in backlog))  # the loop runs again: every admitted one is answered
        end = time.monotonic() + 60.0
        while rt.shed_now() is not None and time.monotonic() < end:
            await asyncio.sleep(0.01)
        after = rt.shed_now()
        late = rt.submit([7])
        await late[0].future
        await rt.stop(grace_s=5.0)
        return retry, message, after, len(backlog), rec

    retry, message, after, admitted, rec = asyncio.run(main())
    assert retry == 1.0 and "the front door is" in message and "ms behind (6 in flight)" in message
    assert after is None and admitted == 6
    assert rec.n_admitted == 7 and rec.n_answered == 7 and rec.n_shed == 1


@pytest.mark.parametrize("bad", [(0.0, 0.05), (-1.0, 0.05), (0.005, -1.0)])
def test_bad_probe_settings_are_refused(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="interval_s"):
        LoopLag(*bad)
