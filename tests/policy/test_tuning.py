"""The online threshold tuner: scoring a window, Apparate's hill climbing (steps, repair, optimum), and when to tune."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.cascade import evaluate
from cascadeserve.policy.forwarding import is_sure
from cascadeserve.policy.tuning import MIN_STEP, OutcomeWindow, ThresholdTuner, hill_climb, score
from cascadeserve.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]

# Five samples, two stages costing 1 and 10 ms. Stage 0 is right on the samples of certainty 0.9, 0.8 and 0.4 and
# wrong on 0.6 and 0.2; the last stage is the reference. Lowering the threshold t lets more exit:
#   t > 0.9: none exit (acc 1, work 11); (0.6, 0.8]: two (1, 7); (0.4, 0.6]: three (0.8, 5);
#   (0.2, 0.4]: four (0.8, 3); t <= 0.2: all five (0.6, 1).
CERT = np.array([[0.9, 1.0], [0.8, 1.0], [0.6, 1.0], [0.4, 1.0], [0.2, 1.0]])
PRED = np.array([[1, 1], [1, 1], [0, 1], [1, 1], [0, 1]])
REF = np.ones(5, dtype=np.int64)
W = np.ones(5)
MS = np.array([1.0, 10.0])


def test_score_counts_who_exits_where_and_what_it_costs() -> None:
    s = score(CERT, PRED, REF, W, np.array([[1.0], [0.9], [0.7], [0.5], [0.3], [0.1]]), MS)
    assert s.accuracy.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.8, 0.8, 0.6])
    assert s.work_ms.tolist() == pytest.approx([11.0, 9.0, 7.0, 5.0, 3.0, 1.0])


def test_weights_stand_for_the_unaudited_early_exits() -> None:
    # the one audited early exit of certainty 0.9 weighs 4: it stands for 4 such samples
    w = np.array([4.0, 1.0, 1.0, 1.0, 1.0])
    s = score(CERT, PRED, REF, w, np.array([[0.85]]), MS)
    assert s.work_ms[0] == pytest.approx((4 * 1 + 4 * 11) / 8)
    assert s.accuracy[0] == pytest.approx(1.0)


def test_hill_climb_doubles_a_chosen_step_halves_a_broken_one_and_reaches_the_optimum() -> None:
    r = hill_climb(CERT, PRED, REF, W, MS, [1.0], target=0.8)
    assert r.feasible and r.accuracy == pytest.approx(0.8) and r.work_ms == pytest.approx(3.0)
    # steps 0.1, 0.2, 0.4 (doubling after each move taken); then 0.8, 0.4, 0.2, 0.1 break the target and halve,
    # 0.05 is taken (doubles to 0.1, which breaks), 0.025, 0.0125 and the floor 0.01 follow
    assert [t for _, t in r.moves] == [0.9, 0.7, 0.3, 0.25, 0.225, 0.2125, 0.2025]
    assert 0.2 < r.thresholds[0] <= 0.4


def test_hill_climb_repairs_thresholds_that_broke_the_target_first() -> None:
    r = hill_climb(CERT, PRED, REF, W, MS, [0.1], target=0.8)
    # 0.2 still lets every sample exit (a plateau: nothing gains), so the step doubles and 0.3 is the first move
    assert r.moves[0] == (0, 0.3)
    assert r.feasible and r.accuracy >= 0.8 and r.work_ms == pytest.approx(3.0)


def test_hill_climb_says_when_no_threshold_holds_the_target() -> None:
    pred = PRED.copy()
    pred[0, 1] = 0  # the reference itself is not what stage 1 says on sample 0 ...
    ref = np.array([1, 1, 1, 1, 0])  # ... and a label the cascade never gives
    r = hill_climb(CERT, pred, ref, W, MS, [0.5], target=0.99)
    assert not r.feasible and r.accuracy < 0.99


@st.composite
def windows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    k = draw(st.integers(2, 4))
    n = draw(st.integers(1, 40))
    cert = np.array(draw(st.lists(st.lists(st.floats(0, 1), min_size=k, max_size=k), min_size=n, max_size=n)))
    pred = np.array(draw(st.lists(st.lists(st.integers(0, 2), min_size=k, max_size=k), min_size=n, max_size=n)))
    ref = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    w = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 50.0]), min_size=n, max_size=n)))
    ms = np.array(draw(st.lists(st.floats(0.1, 100), min_size=k, max_size=k)))
    return cert, pred, ref, w, ms


@settings(max_examples=150, deadline=None)
@given(windows(), st.lists(st.floats(0, 1), min_size=3, max_size=3), st.floats(0, 1))
def test_score_is_the_serving_rule_applied_record_by_record(
    win: tuple[np.ndarray, ...], start: list[float], target: float
) -> None:
    cert, pred, ref, w, ms = win
    k = cert.shape[1]
    th = start[: k - 1]
    acc = work = 0.0
    for c, p, r, wt in zip(cert, pred, ref, w, strict=True):
        j = next((s for s in range(k - 1) if is_sure(float(c[s]), th[s])), k - 1)
        acc += wt * (p[j] == r)
        work += wt * float(ms[: j + 1].sum())
    s = score(cert, pred, ref, w, np.array([th]), ms)
    assert s.accuracy[0] == pytest.approx(acc / w.sum())
    assert s.work_ms[0] == pytest.approx(work / w.sum())
    # the climber keeps what it promises: the target when it says feasible, and never more work than a start that
    # already held the target
    res = hill_climb(cert, pred, ref, w, ms, th, target)
    again = score(cert, pred, ref, w, np.array([res.thresholds]), ms)
    assert again.accuracy[0] == pytest.approx(res.accuracy) and again.work_ms[0] == pytest.approx(res.work_ms)
    if res.feasible:
        assert res.accuracy >= target - 1e-12
    if s.accuracy[0] >= target:
        assert res.feasible and res.work_ms <= s.work_ms[0] + 1e-9
    assert all(0.0 <= t <= 1.0 for t in res.thresholds)


def test_score_agrees_with_the_offline_cascade_evaluator_on_a_real_profile() -> None:
    p = load_profile(ROOT / "profiles" / "digits")
    models = ("logreg", "mlp", "cnn")
    rows = [p.index(m) for m in models]
    th = np.array([[0.9, 0.5], [0.99, 0.95], [0.3, 0.0]])
    ms = np.array([p.models[r].runtime.per_sample_ms(4) for r in rows])
    off = evaluate(p, models, th, batch_size=4)
    on = score(
        p.certainties[rows].T, p.predictions[rows].T.astype(np.int64), p.labels.astype(np.int64),
        np.ones(p.n_samples), th, ms,
    )  # fmt: skip
    # exits differ only where a certainty equals a threshold exactly, which the recorded values never do here
    assert on.accuracy == pytest.approx(off.accuracy)
    assert on.work_ms == pytest.approx(off.work_ms)


def test_window_is_a_bounded_ring() -> None:
    w = OutcomeWindow(2, capacity=3)
    for i in range(5):
        w.add([i / 10, 1.0], [i, i], i, 1.0)
    _, _, r, _ = w.arrays()
    assert len(w) == 3 and sorted(r.tolist()) == [2, 3, 4]
    with pytest.raises(ValueError, match="2 certainties"):
        w.add([0.1], [1], 1)
    with pytest.raises(ValueError, match="weight"):
        w.add([0.1, 0.2], [1, 1], 1, 0.0)


def test_tuner_waits_for_records_tunes_below_target_and_periodically() -> None:
    tuner = ThresholdTuner(0.8, {0: MS}, n_stages={0: 2}, min_records=5, period_s=10.0)
    win = tuner.windows[0]
    for c, p, r in zip(CERT[:4], PRED[:4], REF[:4], strict=True):
        win.add(c.tolist(), p.tolist(), int(r))
    assert tuner.decide(0.0, 0, (0.1,)) is None  # four records: too few to judge
    win.add(CERT[4].tolist(), PRED[4].tolist(), int(REF[4]))
    d = tuner.decide(1.0, 0, (0.1,))  # 0.6 < 0.8: below target, re-tuned at once
    assert d is not None and d.reason == "below target" and d.window_accuracy == pytest.approx(0.6)
    assert d.accuracy >= 0.8 and d.work_ms == pytest.approx(3.0) and d.old == (0.1,)
    assert tuner.decide(2.0, 0, d.new) is None  # holds the target and not due: nothing to do
    assert tuner.decide(11.0, 0, (0.7,)) is not None  # due: periodic re-tune takes the savings
    assert tuner.decide(11.5, 0, (0.7,)) is None


def test_tuner_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="target"):
        ThresholdTuner(1.5, {0: MS}, n_stages={0: 2})
    with pytest.raises(ValueError, match="period"):
        ThresholdTuner(0.5, {0: MS}, n_stages={0: 2}, period_s=0)
    assert MIN_STEP == 0.01


def test_the_audit_split_answers_sure_rows_once_and_audits_every_1_f_th_early_exit() -> None:
    from cascadeserve.policy.tuning import AuditSampler

    sampler = AuditSampler(0.5)
    sure = np.array([True, True, False, True, True, True])
    last = np.array([False, False, False, True, False, False])
    answered = np.array([False, False, False, False, True, False])  # row 4: a continuation, answered already
    answer, audit = sampler.split(sure, last, answered)
    assert answer.tolist() == [True, True, False, True, False, True]
    # early exits are rows 0, 1 and 5 (row 3 is at its last stage): every second one is audited, counted on
    assert audit.tolist() == [False, True, False, False, False, False]
    _, audit = sampler.split(np.array([True]), np.array([False]), np.array([False]))
    assert audit.tolist() == [True]  # the fourth early exit overall: audited
