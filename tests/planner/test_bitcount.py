"""SP1's compiled counts equal numpy's popcounts of the same sets."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.planner.bitcount import extend_counts


@pytest.mark.parametrize("seed", range(5))
def test_the_compiled_counts_are_numpys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, levels, words = int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(1, 6))
    top = np.iinfo(np.uint64).max
    reach = rng.integers(0, top, (p, words), dtype=np.uint64, endpoint=True)
    un = rng.integers(0, top, (levels, words), dtype=np.uint64, endpoint=True)
    correct, oracle = rng.integers(0, top, (2, words), dtype=np.uint64, endpoint=True)
    still, right, bound = extend_counts(reach, un, correct, oracle)

    def count(x: np.ndarray) -> np.ndarray:
        return np.bitwise_count(x.reshape(p * levels, words)).sum(axis=1, dtype=np.int64)

    r, u = reach[:, None, :], un[None, :, :]
    assert np.array_equal(still, count(r & u))
    assert np.array_equal(right, count(r & ~u & correct))
    assert np.array_equal(bound, count(r & u & oracle))


def test_all_ones_and_empty_rows() -> None:
    ones = np.full((1, 2), np.iinfo(np.uint64).max, dtype=np.uint64)
    zero = np.zeros((1, 2), dtype=np.uint64)
    still, right, bound = extend_counts(ones, np.vstack([ones, zero]), ones[0], zero[0])
    assert still.tolist() == [128, 0] and right.tolist() == [0, 128] and bound.tolist() == [0, 0]
