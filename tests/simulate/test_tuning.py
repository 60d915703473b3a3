"""Online threshold tuning in the simulator: audit sampling, whole records, and threshold swaps under real drift."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import AuditSampler, OnlineTuning, ThresholdDecision
from cascadeserve.profile import load_profile
from cascadeserve.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
STREAM = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
CASCADE = Cascade(("logreg", "mlp", "cnn-wide"), (0.6, 0.6))


def rows() -> dict[str, int]:
    return {m: STREAM.index(m) for m in STREAM.model_names}


def test_audit_sampler_takes_an_even_share_across_batches() -> None:
    whole = AuditSampler(0.1).take(100)
    parts = AuditSampler(0.1)
    split = np.concatenate([parts.take(33), parts.take(0), parts.take(67)])
    assert whole.sum() == 10 and np.array_equal(whole, split)
    assert np.flatnonzero(whole).tolist() == list(range(9, 100, 10))  # every tenth, never a burst
    assert AuditSampler(1.0).take(5).all()
    with pytest.raises(ValueError, match="audit fraction"):
        AuditSampler(0.0)


def test_audits_never_delay_an_answer_and_every_record_becomes_whole() -> None:
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    arrivals = np.arange(200) * 0.05  # 50 ms apart: every batch is done before the next arrival
    plain = simulate(STREAM, plan, arrivals)
    tuning = OnlineTuning.for_plan(PlanTables(plan, rows()), STREAM, audit_fraction=1.0, min_records=10**9)
    audited = simulate(STREAM, plan, arrivals, tuning=tuning)
    assert np.array_equal(plain.finish, audited.finish) and np.array_equal(plain.answer_row, audited.answer_row)
    window = tuning.tuner.windows[0]
    assert len(window) == 200  # each request ran every stage: answered early and audited, or answered last
    _, _, _, weight = window.arrays()
    early = int((plain.answer_row != STREAM.index("cnn-wide")).sum())
    assert 0 < early < 200 and int((weight == 1.0).sum()) == 200  # audit fraction 1: an audit stands for one
    assert audited.threshold_changes == []


def test_against_labels_every_whole_record_takes_its_true_label_at_once() -> None:
    """Tuning against labels in a simulation: the replay knows each sample's label, so every whole record enters the
    window with it at once (a server waits for its client's feedback instead)."""
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    arrivals = np.arange(200) * 0.05
    tuning = OnlineTuning.for_plan(
        PlanTables(plan, rows()), STREAM, audit_fraction=1.0, min_records=10**9, reference="label"
    )
    simulate(STREAM, plan, arrivals, tuning=tuning)
    _, pred, ref, _ = tuning.tuner.windows[0].arrays()
    labels = STREAM.labels[np.arange(200) % STREAM.n_samples]
    assert len(ref) == 200 and np.array_equal(ref, labels)  # the true labels, in arrival order
    assert not np.array_equal(pred[:, -1], labels)  # not the last stage's answers (the "audit" reference)


def test_tuning_raises_thresholds_when_confident_models_start_to_err() -> None:
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    shifted = np.flatnonzero(STREAM.sample_ids >= SHIFT_ID_OFFSET)
    arrivals = np.arange(3000) * 0.01
    samples = shifted[np.arange(3000) % len(shifted)]
    fixed = simulate(STREAM, plan, arrivals, samples=samples)
    tuning = OnlineTuning.for_plan(
        PlanTables(plan, rows()), STREAM, target=0.97, audit_fraction=0.2, min_records=100, window=400, period_s=2.0
    )
    tuned = simulate(STREAM, plan, arrivals, samples=samples, tuning=tuning)
    assert tuned.threshold_changes, "the window fell below the target: the tuner must act"
    first = tuned.threshold_changes[0]
    assert first.old == (0.6, 0.6) and first.reason == "below target" and first.window_accuracy < 0.97
    assert max(tuned.threshold_changes[-1].new) > 0.6
    late = slice(1500, 3000)  # once tuned, accuracy is well above the fixed thresholds'
    assert tuned.correct[late].mean() > fixed.correct[late].mean() + 0.1
    assert tuned.unanswered == 0


def test_applied_thresholds_change_who_exits_and_the_length_is_checked() -> None:
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    tb = PlanTables(plan, rows())
    row = STREAM.index("logreg")
    c = np.array([0.5, 0.7, 0.95])
    assert tb.exits(row, c, None).tolist() == [False, True, True]
    tb.apply_thresholds(ThresholdDecision.in_force(0, (0.9, 0.6)))
    assert tb.thresholds_of(0) == (0.9, 0.6) and tb.exits(row, c, None).tolist() == [False, False, True]
    assert tb.exits_list(row, c.tolist(), None) == [False, False, True]
    with pytest.raises(ValueError, match="2 thresholds"):
        tb.apply_thresholds(ThresholdDecision.in_force(0, (0.5,)))
