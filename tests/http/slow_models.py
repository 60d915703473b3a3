"""A real model a test slows down and speeds up at will: the class of each row is its input modulo 3 (every stage is
certain), after a sleep of :data:`DELAY_S` seconds per batch (a module value the test sets while serving)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

__all__ = ["DELAY_S", "tunable"]

DELAY_S = [0.0]  # the sleep per batch, read at each batch (a list: the test sets DELAY_S[0])


def tunable() -> Callable[[np.ndarray], np.ndarray]:
    """Factory (callable adapter): scores ``[n, 3]``, one-hot on ``int(x) % 3``, after ``DELAY_S[0]`` seconds."""

    def scores(batch: np.ndarray) -> np.ndarray:
        if DELAY_S[0] > 0:
            time.sleep(DELAY_S[0])
        classes = np.asarray(batch, dtype=np.float64).reshape(len(batch), -1)[:, 0].astype(np.int64) % 3
        out: np.ndarray = np.eye(3)[classes]
        return out

    return scores
