"""The data-drift stream: one-pixel shifts, the order that ramps them in, and the committed drifted profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET, drift_order, shift_images
from cascadeserve.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_every_image_moves_by_one_pixel_in_some_direction() -> None:
    x = np.zeros((50, 64), dtype=np.float32)
    x[:, 3 * 8 + 4] = 16.0  # one lit pixel at row 3, column 4
    out = shift_images(x, seed=1).reshape(-1, 8, 8)
    for img in out:
        (r,), (c,) = np.nonzero(img)
        assert (r, c) != (3, 4) and abs(r - 3) <= 1 and abs(c - 4) <= 1
    assert np.array_equal(out, shift_images(x, seed=1).reshape(-1, 8, 8))  # seeded: the same stream every time


def test_drift_order_ramps_from_clean_to_shifted() -> None:
    clean, shifted = np.arange(10), np.arange(10) + SHIFT_ID_OFFSET
    order = drift_order(10_000, clean, shifted, 0.25, 0.75, seed=0)
    is_shift = order >= SHIFT_ID_OFFSET
    assert not is_shift[:2500].any() and is_shift[7500:].all()
    share = [is_shift[a : a + 1000].mean() for a in range(2500, 7500, 1000)]
    assert share == sorted(share) and share[0] < 0.2 and share[-1] > 0.8
    assert set(order[:2500].tolist()) == set(clean.tolist())  # each kind cycles through all its ids
    with pytest.raises(ValueError):
        drift_order(10, clean, shifted, 0.8, 0.2)


def test_committed_drift_profile_is_a_real_drift() -> None:
    s = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
    c = load_profile(ROOT / "profiles" / "digits-drift" / "clean")
    shifted = s.sample_ids >= SHIFT_ID_OFFSET
    assert shifted.sum() == c.n_samples == 600
    acc = (s.predictions[:, shifted] == s.labels[shifted]).mean(axis=1)
    wide = s.index("cnn-wide")
    # the cheap models collapse on shifted images, the augmented top model holds
    assert acc[wide] > 0.9 and all(a < 0.5 for i, a in enumerate(acc) if i != s.index("cnn") and i != wide)
    assert np.array_equal(s.predictions[:, ~shifted], c.predictions)  # the clean half is the plan's data
