"""Cascades: hand-computed evaluation, the bitset path against the dense path, monotonicity, Pareto frontiers."""

from __future__ import annotations

from itertools import combinations, pairwise, product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.cascade import BITSET_MAX_SAMPLES, Cascade, enumerate_frontier, evaluate, pareto_front
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve


def tiny_profile() -> Profile:
    """Four samples, three models.

    ====== ===== ============ ============ ============
    sample label a pred/cert  b pred/cert  c pred/cert
    ====== ===== ============ ============ ============
    0      0     0 / 0.9  ✓   0 / 0.5  ✓   0 / 0.1  ✓
    1      1     1 / 0.4  ✓   1 / 0.6  ✓   1 / 0.2  ✓
    2      0     1 / 0.8  ✗   0 / 0.7  ✓   0 / 0.3  ✓
    3      1     0 / 0.2  ✗   0 / 0.9  ✗   1 / 0.4  ✓
    ====== ===== ============ ============ ============

    Per-sample runtimes at batch 1: a 1 ms, b 4 ms, c 10 ms; at batch 4: a 0.5, b 2, c 4.
    """
    models = (
        ModelProfile("a", 100.0, RuntimeCurve((1, 4), (1.0, 2.0))),
        ModelProfile("b", 300.0, RuntimeCurve((1, 4), (4.0, 8.0))),
        ModelProfile("c", 600.0, RuntimeCurve((1, 4), (10.0, 16.0))),
    )
    return Profile(
        name="tiny",
        models=models,
        sample_ids=np.arange(4),
        labels=np.array([0, 1, 0, 1]),
        predictions=np.array([[0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 0, 1]]),
        certainties=np.array([[0.9, 0.4, 0.8, 0.2], [0.5, 0.6, 0.7, 0.9], [0.1, 0.2, 0.3, 0.4]]),
    )


TINY = tiny_profile()
METHODS = ["bitsets", "dense"]


# -- the Cascade value ------------------------------------------------------------------------------------------
def test_cascade_value_and_str() -> None:
    c = Cascade(["a", "b", "c"], [0.5, 1])  # type: ignore[arg-type]
    assert c.models == ("a", "b", "c")
    assert c.thresholds == (0.5, 1.0)
    assert str(c) == "a@0.5 > b@1 > c"
    assert str(Cascade(("a",))) == "a"
    assert Cascade(("a", "b"), (0.5,)) == Cascade(("a", "b"), (0.5,))


@pytest.mark.parametrize(
    ("models", "thresholds", "match"),
    [
        ((), (), "at least one model"),
        (("a", "a"), (0.5,), "cannot repeat"),
        (("a", "b"), (), "needs 1 thresholds, got 0"),
        (("a",), (0.5,), "needs 0 thresholds, got 1"),
        (("a", "b"), (1.01,), "outside"),
        (("a", "b"), (-0.1,), "outside"),
        (("a", "b"), (float("nan"),), "outside"),
    ],
)
def test_invalid_cascades(models: tuple[str, ...], thresholds: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Cascade(models, thresholds)


# -- hand-computed evaluation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_two_stage_evaluation_by_hand(method: str) -> None:
    ev = evaluate(TINY, ("a", "b"), [[0.0], [0.5], [0.8], [0.85], [1.0]], method=method)
    # t=0: a answers all (2 right); t=0.5 and t=0.8 (a tie, answered): a answers 0, 2 (1 right), b gets 1, 3
    # (1 right); t=0.85: a answers 0 (right), b gets 1, 2, 3 (2 right); t=1: b answers all (3 right).
    np.testing.assert_array_equal(ev.accuracy, [0.5, 0.5, 0.5, 0.75, 0.75])
    np.testing.assert_array_equal(ev.reach, [[1, 0], [1, 0.5], [1, 0.5], [1, 0.75], [1, 1]])
    np.testing.assert_allclose(ev.work_ms, [1.0, 3.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(ev.answered(), [[1, 0], [0.5, 0.5], [0.5, 0.5], [0.25, 0.75], [0, 1]])
    assert ev.models == ("a", "b")
    assert ev.batch_size == 1.0
    assert ev.cascade(3) == Cascade(("a", "b"), (0.85,))


@pytest.mark.parametrize("method", METHODS)
def test_three_stage_evaluation_by_hand(method: str) -> None:
    ev = evaluate(TINY, ("a", "b", "c"), [[0.5, 0.65], [0.95, 0.0], [0.95, 0.95], [0.0, 0.0]], method=method)
    # [0.5, 0.65]: a answers 0 ✓, 2 ✗; b gets 1, 3 and answers 3 ✗ (0.9 ≥ 0.65); c answers 1 ✓.
    # [0.95, 0]: b answers everything (3 right). [0.95, 0.95]: c answers everything (4 right).
    np.testing.assert_array_equal(ev.accuracy, [0.5, 0.75, 1.0, 0.5])
    np.testing.assert_array_equal(ev.reach, [[1, 0.5, 0.25], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    np.testing.assert_allclose(ev.work_ms, [1 + 0.5 * 4 + 0.25 * 10, 5.0, 15.0, 1.0])
    np.testing.assert_array_equal(ev.answered()[0], [0.5, 0.25, 0.25])


def test_work_at_a_larger_batch() -> None:
    ev = evaluate(TINY, ("a", "b"), [[0.5]], batch_size=4)
    np.testing.assert_allclose(ev.work_ms, [0.5 + 0.5 * 2.0])
    assert ev.batch_size == 4


def test_single_model_cascade_and_cascade_evaluate() -> None:
    ev = Cascade(("b",)).evaluate(TINY)
    np.testing.assert_array_equal(ev.accuracy, [0.75])
    np.testing.assert_array_equal(ev.reach, [[1.0]])
    np.testing.assert_allclose(ev.work_ms, [4.0])
    assert ev.thresholds.shape == (1, 0)
    ev2 = Cascade(("a", "c"), (0.85,)).evaluate(TINY, batch_size=4)
    np.testing.assert_array_equal(ev2.accuracy, [1.0])  # a answers 0 ✓, c the rest ✓
    np.testing.assert_allclose(ev2.work_ms, [0.5 + 0.75 * 4.0])


def test_model_order_is_the_callers() -> None:
    ev = evaluate(TINY, ("b", "a"), [[0.75]])
    # b answers 3 ✗ (0.9); a gets 0 ✓, 1 ✓, 2 ✗
    np.testing.assert_array_equal(ev.accuracy, [0.5])
    np.testing.assert_array_equal(ev.reach, [[1, 0.75]])


def test_unknown_model_and_method() -> None:
    with pytest.raises(KeyError, match="unknown model 'z'"):
        evaluate(TINY, ("a", "z"), [[0.5]])
    with pytest.raises(ValueError, match="unknown method"):
        evaluate(TINY, ("a", "b"), [[0.5]], method="magic")


@pytest.mark.parametrize("method", METHODS)
def test_threshold_zero_means_the_first_stage_answers_everything(method: str, toy_profile: Profile) -> None:
    prof = toy_profile
    ev = evaluate(prof, ("m0", "m1", "m2"), [[0.0, 0.0], [0.0, 1.0]], method=method)
    np.testing.assert_array_equal(ev.reach, [[1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(ev.accuracy, [prof.accuracies[0]] * 2)
    np.testing.assert_allclose(ev.work_ms, prof.model("m0").runtime.per_sample_ms(1))


@pytest.mark.parametrize("method", METHODS)
def test_thresholds_above_every_certainty_forward_everything(method: str, toy_profile: Profile) -> None:
    prof = toy_profile
    above = np.nextafter(1.0, 2.0)  # no certainty reaches it; Cascade itself refuses values above 1
    ev = evaluate(prof, ("m0", "m1", "m2"), [[above, above]], method=method)
    np.testing.assert_array_equal(ev.reach, [[1, 1, 1]])
    assert ev.accuracy[0] == prof.accuracies[2]
    with pytest.raises(ValueError, match="outside"):
        Cascade(("m0", "m1"), (above,))


@pytest.mark.parametrize("method", METHODS)
def test_threshold_one_answers_only_certainty_one(method: str) -> None:
    prof = Profile(
        "ones",
        TINY.models[:2],
        np.arange(3),
        np.array([0, 0, 0]),
        np.array([[0, 1, 1], [1, 0, 0]]),
        np.array([[1.0, 0.999, 0.0], [0.5, 0.5, 0.5]]),
    )
    ev = evaluate(prof, ("a", "b"), [[1.0]], method=method)
    np.testing.assert_allclose(ev.reach, [[1, 2 / 3]])
    np.testing.assert_allclose(ev.accuracy, [1.0])  # a answers sample 0 ✓; b answers 1, 2 ✓


def test_auto_method_switches_on_sample_count() -> None:
    assert BITSET_MAX_SAMPLES == 16_384
    n = BITSET_MAX_SAMPLES + 1
    rng = np.random.default_rng(3)
    big = Profile(
        "big",
        TINY.models[:2],
        np.arange(n),
        rng.integers(0, 3, n),
        rng.integers(0, 3, (2, n)),
        rng.random((2, n)),
    )
    th = [[0.1], [0.5]]
    auto = evaluate(big, ("a", "b"), th)
    dense = evaluate(big, ("a", "b"), th, method="dense")
    np.testing.assert_array_equal(auto.accuracy, dense.accuracy)
    np.testing.assert_array_equal(auto.reach, dense.reach)
    for i, t in enumerate((0.1, 0.5)):
        sure = big.certainties[0] >= t
        right = np.where(sure, big.correct[0], big.correct[1])
        assert auto.accuracy[i] == right.mean()
        assert auto.reach[i, 1] == (~sure).mean()


# -- reference semantics, bitsets == dense ----------------------------------------------------------------------
def reference(profile: Profile, models: tuple[str, ...], th: list[float]) -> tuple[float, list[float]]:
    """One sample at a time, straight from the definition."""
    rows = [profile.index(m) for m in models]
    correct = 0
    reach = [0] * len(rows)
    for i in range(profile.n_samples):
        for k, r in enumerate(rows):
            reach[k] += 1
            if k == len(rows) - 1 or profile.certainties[r, i] >= th[k]:
                correct += int(profile.predictions[r, i] == profile.labels[i])
                break
    n = profile.n_samples
    return correct / n, [x / n for x in reach]


LEVELS = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]


@st.composite
def random_profiles(draw: st.DrawFn, max_n: int = 70) -> Profile:
    n_models = draw(st.integers(1, 4))
    n = draw(st.integers(1, max_n))
    cert = st.sampled_from(LEVELS) | st.floats(0.0, 1.0)
    models = tuple(
        ModelProfile(f"m{i}", 1.0, RuntimeCurve((1, 8), (float(i + 1), float(4 * (i + 1))))) for i in range(n_models)
    )
    labels = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    preds = np.array(draw(st.lists(st.integers(0, 2), min_size=n * n_models, max_size=n * n_models)))
    certs = np.array(draw(st.lists(cert, min_size=n * n_models, max_size=n * n_models)), dtype=np.float64)
    return Profile("rand", models, np.arange(n), labels, preds.reshape(n_models, n), certs.reshape(n_models, n))


@st.composite
def profile_order_thresholds(draw: st.DrawFn) -> tuple[Profile, tuple[str, ...], np.ndarray]:
    prof = draw(random_profiles())
    order = tuple(draw(st.permutations(prof.model_names)))
    k = draw(st.integers(1, len(order)))
    t = draw(st.integers(1, 6))
    th = st.sampled_from(LEVELS) | st.floats(0.0, 1.0)
    ths = np.array(draw(st.lists(th, min_size=t * (k - 1), max_size=t * (k - 1))), dtype=np.float64)
    return prof, order[:k], ths.reshape(t, k - 1)


@settings(max_examples=100, deadline=None)
@given(profile_order_thresholds(), st.sampled_from([1.0, 3.0, 8.0]))
def test_bitsets_equal_dense_and_the_reference(case: tuple[Profile, tuple[str, ...], np.ndarray], bs: float) -> None:
    prof, models, th = case
    bits = evaluate(prof, models, th, method="bitsets", batch_size=bs)
    dense = evaluate(prof, models, th, method="dense", batch_size=bs)
    np.testing.assert_array_equal(bits.accuracy, dense.accuracy)
    np.testing.assert_array_equal(bits.reach, dense.reach)
    np.testing.assert_array_equal(bits.work_ms, dense.work_ms)
    np.testing.assert_array_equal(bits.thresholds, dense.thresholds)
    assert bits.accuracy.shape == (len(th),)
    assert bits.reach.shape == (len(th), len(models))
    for i in range(min(len(th), 3)):  # the slow reference on a few rows is enough
        acc, reach = reference(prof, models, th[i].tolist())
        assert bits.accuracy[i] == pytest.approx(acc, abs=1e-12)
        np.testing.assert_allclose(bits.reach[i], reach, atol=1e-12)
    ans = bits.answered()
    np.testing.assert_allclose(ans.sum(axis=1), 1.0)
    assert np.all(ans >= -1e-12)


@settings(max_examples=60, deadline=None)
@given(
    profile_order_thresholds(),
    st.integers(0, 10),
    st.floats(0.0, 1.0),
    st.sampled_from(METHODS),
)
def test_raising_a_threshold_never_lowers_later_reach(
    case: tuple[Profile, tuple[str, ...], np.ndarray], stage: int, bump: float, method: str
) -> None:
    prof, models, th = case
    if len(models) < 2:
        return
    s = stage % (len(models) - 1)
    raised = th.copy()
    raised[:, s] = np.minimum(1.0, th[:, s] + bump)
    lo = evaluate(prof, models, th, method=method)
    hi = evaluate(prof, models, raised, method=method)
    assert np.all(hi.reach[:, s + 1 :] >= lo.reach[:, s + 1 :])
    np.testing.assert_array_equal(hi.reach[:, : s + 1], lo.reach[:, : s + 1])
    assert np.all(hi.work_ms >= lo.work_ms - 1e-12)


@settings(max_examples=30, deadline=None)
@given(random_profiles())
def test_reach_is_non_increasing_along_the_cascade(prof: Profile) -> None:
    models = prof.model_names
    combos = list(product([0.0, 0.5, 1.0], repeat=len(models) - 1))
    th = np.array(combos, dtype=np.float64).reshape(len(combos), len(models) - 1)
    ev = evaluate(prof, models, th)
    assert np.all(ev.reach[:, 0] == 1.0)
    assert np.all(np.diff(ev.reach, axis=1) <= 0)


# -- pareto_front -----------------------------------------------------------------------------------------------
def test_pareto_front_by_hand() -> None:
    acc = np.array([0.5, 0.7, 0.6, 0.7, 0.9, 0.4])
    work = np.array([1.0, 2.0, 3.0, 2.0, 5.0, 1.0])
    # 5 ties 0 on work but is less accurate; 3 ties 1 exactly (the lower index wins); 2 is beaten by 1.
    np.testing.assert_array_equal(pareto_front(acc, work), [0, 1, 4])
    np.testing.assert_array_equal(pareto_front(np.array([0.6, 0.8]), np.array([1.0, 1.0])), [1])
    np.testing.assert_array_equal(pareto_front(np.array([0.3]), np.array([7.0])), [0])
    assert pareto_front(np.array([]), np.array([])).tolist() == []
    with pytest.raises(ValueError, match="same shape"):
        pareto_front(np.zeros(2), np.zeros(3))


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """(acc, work): a is at least as good on both axes and better on one."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
def test_pareto_front_invariants(points: list[tuple[int, int]]) -> None:
    acc = np.array([p[0] / 6 for p in points])
    work = np.array([float(p[1]) for p in points])
    keep = pareto_front(acc, work).tolist()
    pts = list(zip(acc.tolist(), work.tolist(), strict=True))
    assert len(set(keep)) == len(keep)
    for i in keep:  # nobody beats a kept point
        assert not any(_dominates(p, pts[i]) for p in pts)
    for i in set(range(len(pts))) - set(keep):  # every dropped point is beaten or tied by a kept one
        assert any(pts[j][0] >= pts[i][0] and pts[j][1] <= pts[i][1] for j in keep)
    kw, ka = work[keep], acc[keep]
    assert np.all(np.diff(kw) > 0)  # cheapest first, one point per work value
    assert np.all(np.diff(ka) > 0)  # and each costlier point is strictly more accurate
    assert ka[-1] == acc.max()
    assert kw[0] == work.min()


# -- enumerate_frontier -----------------------------------------------------------------------------------------
def test_frontier_of_the_tiny_profile() -> None:
    front = enumerate_frontier(TINY, levels=LEVELS)
    assert front[0] == (Cascade(("a",)), 0.5, 1.0)
    assert front[-1][1] == 1.0
    # the cheapest way to be always right: a answers sample 0 only (t ∈ (0.8, 0.9]), c the rest
    assert front[-1] == (Cascade(("a", "c"), (0.9,)), 1.0, 1.0 + 0.75 * 10.0)
    works = [w for _, _, w in front]
    accs = [a for _, a, _ in front]
    assert works == sorted(works)
    assert all(x < y for x, y in pairwise(accs))
    for c, a, w in front:
        ev = c.evaluate(TINY)
        assert (float(ev.accuracy[0]), float(ev.work_ms[0])) == (a, w)


def brute_force(prof: Profile, levels: list[float], batch_size: float = 1.0) -> tuple[float, float]:
    """(best accuracy, cheapest work) over every ordered-by-cost subset and threshold vector."""
    best_acc, min_work = -1.0, np.inf
    order = prof.by_cost(int(batch_size))
    for k in range(1, len(order) + 1):
        for subset in combinations(order, k):
            combos = list(product(levels, repeat=k - 1))
            th = np.array(combos, dtype=np.float64).reshape(len(combos), k - 1)
            ev = evaluate(prof, subset, th, batch_size=batch_size, method="dense")
            best_acc = max(best_acc, float(ev.accuracy.max()))
            min_work = min(min_work, float(ev.work_ms.min()))
    return best_acc, min_work


def test_frontier_of_the_toy_profile_holds_cheapest_and_most_accurate(toy_profile: Profile) -> None:
    prof = toy_profile
    levels = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    front = enumerate_frontier(prof, levels=levels)
    best_acc, min_work = brute_force(prof, levels)
    cheapest = prof.by_cost(1)[0]
    assert front[0][0] == Cascade((cheapest,))
    assert front[0][1] == prof.accuracies[prof.index(cheapest)]
    assert front[0][2] == min_work == prof.model(cheapest).runtime.per_sample_ms(1)
    assert front[-1][1] == best_acc
    assert best_acc >= prof.accuracies.max()


def test_frontier_with_max_models_one_is_over_single_models(toy_profile: Profile) -> None:
    prof = toy_profile
    front = enumerate_frontier(prof, max_models=1)
    assert all(len(c.models) == 1 for c, _, _ in front)
    assert front[0][0] == Cascade(("m0",))
    assert front[-1][1] == prof.accuracies.max()


@settings(max_examples=40, deadline=None)
@given(random_profiles(max_n=30), st.permutations([1.0, 2.0, 3.0, 5.0]))
def test_frontier_always_holds_cheapest_single_model_and_most_accurate_point(
    prof0: Profile, costs: list[float]
) -> None:
    # distinct per-sample costs, in a random order relative to the model names
    models = tuple(ModelProfile(m.name, 1.0, RuntimeCurve((1,), (costs[i],))) for i, m in enumerate(prof0.models))
    prof = Profile("r", models, prof0.sample_ids, prof0.labels, prof0.predictions, prof0.certainties)
    levels = [0.0, 0.5, 1.0]
    front = enumerate_frontier(prof, levels=levels)
    best_acc, min_work = brute_force(prof, levels)
    cheapest = min(models, key=lambda m: m.runtime.per_sample_ms(1)).name
    assert front[0][0] == Cascade((cheapest,))
    assert front[0][2] == min_work
    assert front[-1][1] == best_acc
    keep = pareto_front(np.array([a for _, a, _ in front]), np.array([w for _, _, w in front]))
    assert keep.tolist() == list(range(len(front)))  # the frontier is its own front
