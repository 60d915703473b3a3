"""A data-drift stream from real data: the digits validation images, increasingly shifted by one pixel.

Why shifts: the digits family's cheap models (``logreg``, ``mlp``, ``cnn-small``, ``cnn``) were trained on centred
images and lose half their accuracy on images moved by one pixel, *while staying confident* (the ``mlp``'s mean
certainty only falls from 0.96 to 0.79), whereas ``cnn-wide`` was trained on shifted images and answers with
nine-view test-time augmentation, so it keeps about 90 %. Thresholds chosen on clean validation data then let
many wrong answers exit early: exactly the drift an online threshold tuner must catch, with a most accurate
model that still holds up as the reference.

:func:`shifted_profile` runs the family on the clean validation images and on a shifted copy of each (a random
offset in {-1, 0, 1}² other than (0, 0), zero padding; fixed seed) and returns one profile holding both: the clean
samples keep their ids, a shifted sample's id is its clean id plus :data:`SHIFT_ID_OFFSET`. Runtimes and memory
come from a measured profile of the same family. :func:`drift_order` gives the order in which arriving requests
take samples (``simulate --sample-order``): the share of shifted images rises linearly from 0 to 1 between two
points of the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cascadeserve.models.base import require
from cascadeserve.profile import Profile

__all__ = ["SHIFT_ID_OFFSET", "drift_order", "shift_images", "shifted_profile"]

SHIFT_ID_OFFSET = 100_000
"""Added to a clean sample's id to name its shifted copy (load_digits has 1,797 images)."""


def shift_images(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each 8×8 image (rows of 64 pixels) moved by a random offset in {-1, 0, 1}² \\ {(0, 0)}, zero padded."""
    rng = np.random.default_rng(seed)
    offsets = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]
    pick = rng.integers(0, len(offsets), len(x))
    img = np.asarray(x, dtype=np.float32).reshape(-1, 8, 8)
    pad = np.pad(img, ((0, 0), (1, 1), (1, 1)))
    out = np.empty_like(img)
    for i, k in enumerate(pick.tolist()):
        dy, dx = offsets[k]
        out[i] = pad[i, 1 - dy : 9 - dy, 1 - dx : 9 - dx]
    return out.reshape(-1, 64)


def _scores(model: Any, x: np.ndarray) -> np.ndarray:
    torch = require("torch")
    with torch.no_grad():
        out = model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        # the augmented model already returns probabilities; the others return logits (margin needs probabilities)
        p = out if bool(((out >= 0) & (out <= 1)).all()) and bool(torch.allclose(out.sum(1), torch.ones(1))) else None
        return np.asarray((torch.softmax(out, dim=1) if p is None else p).numpy(), dtype=np.float64)


def shifted_profile(measured: Profile, seed: int = 0) -> Profile:
    """The family's records on the clean and the shifted validation images, with ``measured``'s runtimes.

    Needs torch and the trained family (``cascadeserve demo`` trains and caches it; trained here otherwise).
    """
    torch = require("torch")
    from cascadeserve.models.families import digits

    torch.set_num_threads(1)
    _, _, xv, yv, idx = digits.split(seed)
    xs = shift_images(xv, seed)
    x = np.concatenate([xv, xs])
    scores = {m.name: _scores(digits.load(m.name, seed), x) for m in measured.models}
    ids = np.concatenate([idx, idx + SHIFT_ID_OFFSET]).astype(np.int64)
    return Profile.from_scores(
        f"{measured.name}-shifted", measured.models, np.concatenate([yv, yv]), scores, sample_ids=ids,
        device=measured.device, source=f"{measured.source}; shifted copies by cascadeserve.eval.drift_stream",
    )  # fmt: skip


def drift_order(
    n: int, clean_ids: np.ndarray, shifted_ids: np.ndarray, start: float, end: float, seed: int = 0
) -> np.ndarray:
    """Sample ids for ``n`` requests: clean before ``start·n``, shifted after ``end·n``, and in between a shifted
    sample with a probability rising linearly from 0 to 1. Each kind cycles through its ids in a shuffled order."""
    if not 0.0 <= start <= end <= 1.0:
        raise ValueError("need 0 <= start <= end <= 1")
    rng = np.random.default_rng(seed)
    pos = np.arange(n) / max(n, 1)
    span = max(end - start, 1e-12)
    p_shift = np.clip((pos - start) / span, 0.0, 1.0)
    shifted = rng.random(n) < p_shift
    out = np.empty(n, dtype=np.int64)
    for mask, ids in ((~shifted, np.asarray(clean_ids)), (shifted, np.asarray(shifted_ids))):
        k = int(mask.sum())
        if k:
            perm = rng.permutation(ids)
            out[mask] = np.resize(perm, k)
    return out
