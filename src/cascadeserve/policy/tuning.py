"""Threshold tuning while serving: Apparate's accuracy-aware hill climbing (§3.2), adapted to cascades.

A gear's thresholds were chosen offline on validation data. When the inputs drift, the same thresholds let more
wrong answers exit early. The tuner watches a bounded window of **reference outcomes** per gear and re-tunes the
gear's thresholds on that window, holding accuracy at a target while saving as much work as it can.

**Records.** One record per sample that ran through *every* stage of the gear's cascade: its certainty and
prediction at each stage, a reference answer (a label from feedback, or the last stage's prediction, as Apparate
uses the original model's output), and a weight. Samples that no stage answered early always run every stage
(weight 1); samples that exit early are only seen whole when *audit sampling* runs the rest of the cascade for a
fraction ``f`` of them, so each audited record weighs ``1/f``. The weighted window is then an unbiased picture of
the traffic, and any threshold vector can be scored on it without running a model.

**Scoring** (:func:`score`): for each candidate threshold vector, the stage that answers each record is the first
that is sure of it (:func:`~cascadeserve.policy.forwarding.sure_mask`, the serving rule itself, so the tuner
cannot disagree with the engines about who exits), and the candidate's accuracy and expected work (device
milliseconds per sample, from the profile's per-sample costs) follow, vectorised over candidates.

**Hill climbing** (:func:`hill_climb`). Lower thresholds let more samples exit: less work, usually less accuracy.
Starting from the current thresholds:

1. *repair*: while the window's accuracy is below the target, move the one threshold (up or down by its step: with
   labels as the reference, accuracy need not be monotone in a threshold) that buys the most accuracy per
   millisecond of added work; when no move gains, double the steps (a plateau), and give up (``feasible=False``)
   when no move of any size gains;
2. *save*: each round lowers each stage's threshold by its step, in isolation, and takes the single move with the
   most work saved per point of accuracy lost among the moves that keep accuracy at or above the target. The chosen
   stage's step doubles; a stage whose move broke the target halves its step (floor :data:`MIN_STEP`). The climb
   stops when no stage can move.

:class:`ThresholdTuner` decides *when*: when the window's accuracy under the thresholds in force falls below the
target, and every ``period_s`` otherwise; it returns a :class:`ThresholdDecision` (old, new, accuracy, work) that
an engine applies by hot-swapping the gear's thresholds. Pure: time comes in as an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cascadeserve.policy.forwarding import sure_mask
from cascadeserve.policy.kernels import audit_pick
from cascadeserve.policy.tables import PlanTables
from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.profile import Profile

__all__ = [
    "MIN_STEP",
    "AuditSampler",
    "OnlineTuning",
    "OutcomeWindow",
    "Scores",
    "ThresholdDecision",
    "ThresholdTuner",
    "TuneResult",
    "hill_climb",
    "score",
]

MIN_STEP = 0.01
"""The smallest threshold step (Apparate's floor)."""

_TOP = 1.0  # certainty (top-1 minus top-2 score) never exceeds 1: a threshold of 1 is the most cautious


class OutcomeWindow:
    """A bounded ring of fully observed records of one gear's cascade (``n_stages`` stages).

    Arrays, not objects: a re-tune scores every candidate over the whole window in a few numpy calls.
    """

    __slots__ = ("_cert", "_next", "_pred", "_ref", "_size", "_weight", "capacity", "n_stages")

    def __init__(self, n_stages: int, capacity: int = 2048) -> None:
        if n_stages < 1:
            raise ValueError("a window needs at least one stage")
        if capacity < 1:
            raise ValueError("window capacity must be at least 1")
        self.n_stages = n_stages
        self.capacity = capacity
        self._cert = np.zeros((capacity, n_stages))
        self._pred = np.zeros((capacity, n_stages), dtype=np.int64)
        self._ref = np.zeros(capacity, dtype=np.int64)
        self._weight = np.zeros(capacity)
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, certainty: Sequence[float], prediction: Sequence[int], reference: int, weight: float = 1.0) -> None:
        """Record one sample seen at every stage (oldest record dropped when full)."""
        if len(certainty) != self.n_stages or len(prediction) != self.n_stages:
            raise ValueError(f"a record needs {self.n_stages} certainties and predictions")
        if not weight > 0:
            raise ValueError("a record's weight must be positive")
        i = self._next
        self._cert[i] = certainty
        self._pred[i] = prediction
        self._ref[i] = reference
        self._weight[i] = weight
        self._next = (i + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def extend(self, certainty: np.ndarray, prediction: np.ndarray, reference: np.ndarray, weight: np.ndarray) -> None:
        """Record many samples at once (``certainty``/``prediction``: ``[n, n_stages]``), oldest first."""
        n = len(reference)
        if certainty.shape != (n, self.n_stages) or prediction.shape != (n, self.n_stages) or len(weight) != n:
            raise ValueError(f"records need [n, {self.n_stages}] certainties and predictions and n weights")
        if n > self.capacity:  # only the newest ``capacity`` survive anyway
            cut = n - self.capacity
            certainty, prediction, reference, weight = certainty[cut:], prediction[cut:], reference[cut:], weight[cut:]
            n = self.capacity
        idx = (self._next + np.arange(n)) % self.capacity
        self._cert[idx] = certainty
        self._pred[idx] = prediction
        self._ref[idx] = reference
        self._weight[idx] = weight
        self._next = int((self._next + n) % self.capacity)
        self._size = min(self._size + n, self.capacity)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(certainty [n, k], prediction [n, k], reference [n], weight [n])`` of the records held (a view)."""
        n = self._size
        return self._cert[:n], self._pred[:n], self._ref[:n], self._weight[:n]

    def clear(self) -> None:
        self._next = self._size = 0


@dataclass(frozen=True, slots=True)
class Scores:
    """Accuracy and expected work (ms per sample) of ``C`` candidate threshold vectors on one window."""

    accuracy: np.ndarray  # [C]
    work_ms: np.ndarray  # [C]


def score(
    certainty: np.ndarray,
    prediction: np.ndarray,
    reference: np.ndarray,
    weight: np.ndarray,
    thresholds: np.ndarray,
    stage_ms: np.ndarray,
) -> Scores:
    """Score ``thresholds`` (``[C, k-1]``) on a window: weighted accuracy against the reference and expected work.

    ``stage_ms[j]`` is stage ``j``'s device time per sample. A record answered at stage ``j`` costs the sum of the
    stages up to ``j``. An empty window scores accuracy 1 and the first stage's cost.
    """
    th = np.atleast_2d(np.asarray(thresholds, dtype=np.float64))
    k = certainty.shape[1]
    if th.shape[1] != k - 1:
        raise ValueError(f"a cascade of {k} stages needs {k - 1} thresholds per candidate, got {th.shape[1]}")
    total = float(weight.sum())
    cost = np.cumsum(np.asarray(stage_ms, dtype=np.float64))
    if total == 0.0:
        return Scores(np.ones(len(th)), np.full(len(th), cost[0]))
    # sure[c, i, j]: stage j would answer record i under candidate c (the last stage answers the rest)
    sure = sure_mask(certainty[None, :, : k - 1], th[:, None, :])
    sure = np.concatenate([sure, np.ones((len(th), len(weight), 1), dtype=bool)], axis=2)
    answer = np.argmax(sure, axis=2)  # [C, n]: the first sure stage
    correct = np.take_along_axis(np.broadcast_to(prediction, sure.shape), answer[:, :, None], axis=2)[:, :, 0]
    hit = correct == reference[None, :]
    accuracy = (hit * weight[None, :]).sum(axis=1) / total
    work = (cost[answer] * weight[None, :]).sum(axis=1) / total
    return Scores(np.asarray(accuracy), np.asarray(work))


@dataclass(frozen=True, slots=True)
class TuneResult:
    """The hill climber's answer: thresholds, their accuracy and work on the window, and how hard it looked."""

    thresholds: tuple[float, ...]
    accuracy: float
    work_ms: float
    rounds: int
    evaluations: int
    feasible: bool  # the target holds on the window (False only if even the most cautious thresholds miss it)
    moves: tuple[tuple[int, float], ...] = ()  # each move taken: (stage, its new threshold), in order


def hill_climb(
    certainty: np.ndarray,
    prediction: np.ndarray,
    reference: np.ndarray,
    weight: np.ndarray,
    stage_ms: np.ndarray,
    start: Sequence[float],
    target: float,
    *,
    step: float = 0.1,
    max_rounds: int = 200,
) -> TuneResult:
    """Greedy hill climbing over the stages' thresholds (module docstring), from ``start`` towards the target."""
    k1 = len(start)
    th = np.clip(np.asarray(start, dtype=np.float64), 0.0, _TOP)
    steps = np.full(k1, max(step, MIN_STEP))
    evals = 1

    def run(cands: np.ndarray) -> Scores:
        return score(certainty, prediction, reference, weight, cands, stage_ms)

    cur = run(th[None, :])
    acc, work = float(cur.accuracy[0]), float(cur.work_ms[0])
    rounds = 0
    moves: list[tuple[int, float]] = []
    if k1 == 0:
        return TuneResult((), acc, work, 0, evals, acc >= target)
    # 1. repair: move one threshold at a time (up, or down where the window is not monotone) until the target holds
    while acc < target and rounds < max_rounds:
        rounds += 1
        idx = np.arange(k1)
        cands = np.repeat(th[None, :], 2 * k1, axis=0)
        cands[idx, idx] = np.round(np.minimum(_TOP, th + steps), 6)  # round: 0.9 - 0.2 is 0.7, not 0.70000000001
        cands[k1 + idx, idx] = np.round(np.maximum(0.0, th - steps), 6)
        s = run(cands)
        evals += 2 * k1
        gain = s.accuracy - acc
        added = s.work_ms - work
        # accuracy bought per millisecond added; a move that gains and saves work ranks above all
        ratio = np.where(added > 0, gain / np.where(added > 0, added, 1.0), np.inf)
        ratio = np.where(gain > 0, ratio, -np.inf)
        if not (ratio > -np.inf).any():
            # nothing within a step gains: look further (a plateau of equal certainties), up to the whole range
            if bool((steps >= _TOP).all()):
                break  # no move of any size gains accuracy: the target is out of reach from here
            steps = np.minimum(_TOP, steps * 2.0)
            continue
        best = np.flatnonzero(ratio == ratio.max())
        m = int(best[np.argmax(gain[best])])
        j = m % k1
        th = cands[m]
        acc, work = float(s.accuracy[m]), float(s.work_ms[m])
        moves.append((j, float(th[j])))
        steps[j] = min(_TOP, steps[j] * 2.0)
    if acc < target:
        return TuneResult(tuple(th.tolist()), acc, work, rounds, evals, False, tuple(moves))
    # 2. save: lower the single threshold with the best work saved per accuracy lost, within the target
    steps = np.full(k1, max(step, MIN_STEP))
    active = np.ones(k1, dtype=bool)  # a stage whose move breaks the target at the floor step is done
    while rounds < max_rounds:
        movable = active & (th > 0.0)
        if not movable.any():
            break
        rounds += 1
        cands = np.repeat(th[None, :], k1, axis=0)
        idx = np.arange(k1)
        cands[idx, idx] = np.round(np.maximum(0.0, th - steps), 6)
        s = run(cands)
        evals += k1
        ok = movable & (s.accuracy >= target)
        broke = movable & ~ok
        active &= ~(broke & (steps <= MIN_STEP))
        steps[broke] = np.maximum(MIN_STEP, steps[broke] / 2.0)
        if not ok.any():
            continue
        saved = work - s.work_ms
        lost = acc - s.accuracy
        free = ok & (lost <= 0.0)
        if free.any():  # a move that costs no accuracy beats any that does; the biggest saving first
            j = int(np.argmax(np.where(free, saved, -np.inf)))
        else:
            ratio = np.divide(saved, lost, out=np.full(k1, -np.inf), where=ok)
            j = int(np.argmax(ratio))
        th = cands[j]
        acc, work = float(s.accuracy[j]), float(s.work_ms[j])
        moves.append((j, float(th[j])))
        steps[j] = min(_TOP, steps[j] * 2.0)
    return TuneResult(tuple(float(t) for t in th), acc, work, rounds, evals, True, tuple(moves))


class AuditSampler:
    """Which early exits are audited: every ``1/fraction``-th, counted across batches (deterministic, so that the
    simulator and the runtime audit the same samples). An audited sample is answered where it exits, and also runs
    through the remaining stages off the critical path, so that its whole record reaches the window."""

    __slots__ = ("_count", "fraction")

    def __init__(self, fraction: float) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError("the audit fraction must lie in (0, 1]")
        self.fraction = fraction
        self._count = 0

    @property
    def count(self) -> int:
        """How many early exits this sampler has seen (the next one is number ``count``)."""
        return self._count

    def take(self, n: int) -> np.ndarray:
        """Audit mask for the next ``n`` early exits (the kernel ``audit_pick``: ``fraction`` of them, evenly)."""
        c0, f = self._count, self.fraction
        self._count += n
        return np.fromiter((audit_pick(c, f) for c in range(c0, c0 + n)), dtype=bool, count=n)

    def split(self, sure: np.ndarray, last: np.ndarray, answered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One finished batch of a stage, as booleans per row: (answered here, audited). ``sure``: the stage's exit
        decision; ``last``: the row is at its gear's last stage; ``answered``: its request was answered already (an
        audit continuation; on the runtime also by its deadline, or failed). A sure row not answered yet is answered
        here, and if it is not at its last stage it is an early exit, of which :meth:`take` picks the audited ones
        (in row order). The simulator and the runtime both call this, so they audit the same samples."""
        answer = sure & ~answered
        early = answer & ~last
        audit = np.zeros(len(sure), dtype=bool)
        n = int(early.sum())
        if n:
            audit[early] = self.take(n)
        return answer, audit

    @property
    def weight(self) -> float:
        """What one audited record stands for."""
        return 1.0 / self.fraction


class ThresholdTuner:
    """When to re-tune a gear, and to what (module docstring). One per served plan; windows per gear.

    ``target`` is the accuracy to hold against the window's reference: one for every gear, or one per gear (the
    accuracy each gear's plan promised, less a budget). ``min_records`` guards against tuning on a handful of
    samples; ``period_s`` re-tunes even while the target holds (to take savings the drift allows).
    """

    __slots__ = ("_last", "min_records", "period_s", "stage_ms", "step", "target", "windows")

    def __init__(
        self,
        target: float | dict[int, float],
        stage_ms: dict[int, np.ndarray],
        *,
        n_stages: dict[int, int],
        capacity: int = 2048,
        period_s: float = 10.0,
        min_records: int = 200,
        step: float = 0.1,
    ) -> None:
        targets = target if isinstance(target, dict) else {g: target for g in n_stages}
        if any(not 0.0 <= t <= 1.0 for t in targets.values()) or set(targets) != set(n_stages):
            raise ValueError("the accuracy target must lie in [0, 1], one for every gear")
        if period_s <= 0:
            raise ValueError("period_s must be positive")
        self.target = targets
        self.stage_ms = stage_ms
        self.period_s = period_s
        self.min_records = min_records
        self.step = step
        self.windows = {g: OutcomeWindow(k, capacity) for g, k in n_stages.items()}
        self._last: dict[int, float] = {}

    def window_accuracy(self, gear: int, thresholds: Sequence[float]) -> float | None:
        """Accuracy of ``thresholds`` on gear ``gear``'s window (``None`` below ``min_records``)."""
        w = self.windows[gear]
        if len(w) < self.min_records:
            return None
        c, p, r, wt = w.arrays()
        return float(score(c, p, r, wt, np.asarray([thresholds]), self.stage_ms[gear]).accuracy[0])

    def decide(self, now: float, gear: int, thresholds: Sequence[float]) -> ThresholdDecision | None:
        """Re-tune gear ``gear`` now? Returns the swap to apply, or ``None`` (too few records, not due, no change)."""
        if not thresholds:
            return None
        current = self.window_accuracy(gear, thresholds)
        if current is None:
            return None
        target = self.target[gear]
        below = current < target
        due = now - self._last.get(gear, -np.inf) >= self.period_s
        if not below and not due:
            return None
        self._last[gear] = now
        c, p, r, wt = self.windows[gear].arrays()
        res = hill_climb(c, p, r, wt, self.stage_ms[gear], thresholds, target, step=self.step)
        new = tuple(round(t, 6) for t in res.thresholds)
        if new == tuple(thresholds):
            return None
        return ThresholdDecision(
            gear, tuple(thresholds), new, current, res.accuracy, res.work_ms,
            "below target" if below else "periodic", now,
        )  # fmt: skip


class OnlineTuning:
    """Threshold tuning while serving, as one engine-facing object: the tuner, the audit sampler, and where
    reference answers come from (``"audit"``: the last stage's prediction; ``"label"``: the true label, as feedback
    gives it). Both engines call :meth:`record` when a sample's record is whole (it reached its gear's last stage)
    and :meth:`decide` once per producer tick, and apply a decision with
    :meth:`~cascadeserve.policy.PlanTables.apply_thresholds`. The log of decisions (:attr:`changes`) is whole unless
    :meth:`bound_log` bounds it (a server that runs for weeks).
    """

    __slots__ = ("_log_limit", "auditor", "changes", "never_tunes", "reference", "tuner")

    def __init__(self, tuner: ThresholdTuner, audit_fraction: float = 0.02, reference: str = "audit") -> None:
        if reference not in ("audit", "label"):
            raise ValueError(f"reference {reference!r}: use audit or label")
        self.tuner = tuner
        self.auditor = AuditSampler(audit_fraction)
        self.reference = reference
        self.changes: list[ThresholdDecision] = []
        self._log_limit: int | None = None
        # audits and nothing else (``audits_only``): the simulator's compiled engine applies that much itself
        self.never_tunes = False

    def bound_log(self, keep: int) -> None:
        """Keep at least the last ``keep`` decisions in :attr:`changes` and at most ``2 * keep`` (trimmed in one go,
        so that logging stays O(1) amortised)."""
        if keep < 1:
            raise ValueError("keep at least one decision")
        self._log_limit = keep

    @classmethod
    def for_plan(
        cls,
        tables: PlanTables,
        profile: Profile,
        *,
        target: float | None = None,
        budget: float = 0.01,
        audit_fraction: float = 0.02,
        reference: str = "audit",
        period_s: float = 10.0,
        window: int = 2048,
        min_records: int = 200,
    ) -> OnlineTuning:
        """Tuning for ``tables``' gears on ``profile``'s models (``tables`` built with the profile's rows).

        Each gear's target is ``target`` when given, else what the gear scores on the profile's validation records
        with the plan's thresholds, against the same reference, less ``budget``. A stage's work is its model's
        per-sample time at the gear's minimum queue length for it.
        """
        plan = tables.plan
        stage_ms: dict[int, np.ndarray] = {}
        targets: dict[int, float] = {}
        for g, gear in enumerate(plan.gears):
            rows = list(tables.gear_rows(g))
            batch = {gr.model: max(1, gr.min_queue) for gr in gear.replicas}
            stage_ms[g] = np.array([profile.models[m].runtime.per_sample_ms(batch.get(profile.models[m].name, 1))
                                    for m in rows])  # fmt: skip
            if target is not None:
                targets[g] = target
                continue
            pred = profile.predictions[rows].T.astype(np.int64)
            ref = pred[:, -1] if reference == "audit" else profile.labels.astype(np.int64)
            s = score(profile.certainties[rows].T, pred, ref, np.ones(profile.n_samples),
                      np.array([tables.thresholds_of(g)]), stage_ms[g])  # fmt: skip
            targets[g] = float(min(1.0, max(0.0, s.accuracy[0] - budget)))
        n_stages = {g: len(tables.gear_rows(g)) for g in range(len(plan.gears))}
        tuner = ThresholdTuner(
            targets, stage_ms, n_stages=n_stages, capacity=window, period_s=period_s, min_records=min_records
        )
        return cls(tuner, audit_fraction, reference)

    @classmethod
    def audits_only(cls, tables: PlanTables, audit_fraction: float) -> OnlineTuning:
        """Audit sampling with no tuning: the device work of a plan served with ``--tune`` (audited early exits run
        the later stages too) and thresholds that never change. The planner's simulations of a plan sized for
        audits (``GearPlan.audit_fraction``) use it."""
        n_stages = {g: len(tables.gear_rows(g)) for g in range(len(tables.plan.gears))}
        stage_ms = {g: np.zeros(k) for g, k in n_stages.items()}
        tuner = ThresholdTuner(0.0, stage_ms, n_stages=n_stages, capacity=1, period_s=np.inf, min_records=1 << 62)
        out = cls(tuner, audit_fraction, "audit")
        out.never_tunes = True
        return out

    def record(
        self, gear: int, certainty: np.ndarray, prediction: np.ndarray, label: np.ndarray, audited: np.ndarray
    ) -> None:
        """Whole records of ``gear`` (``[n, stages]`` certainties and predictions; ``audited``: audited early exits,
        which stand for ``1/fraction`` samples each)."""
        ref = prediction[:, -1] if self.reference == "audit" else label
        weight = np.where(audited, self.auditor.weight, 1.0)
        self.tuner.windows[gear].extend(certainty, prediction, ref, weight)

    def decide(self, now: float, gear: int, tables: PlanTables) -> ThresholdDecision | None:
        """The tick's tuning decision for the gear in force (logged in :attr:`changes`); the caller applies it."""
        d = self.tuner.decide(now, gear, tables.thresholds_of(gear))
        if d is not None:
            self.changes.append(d)
            keep = self._log_limit
            if keep is not None and len(self.changes) > 2 * keep:
                del self.changes[:-keep]
        return d
