"""SP1's inner count, compiled: for every (prefix, threshold level) pair, three popcounts in one pass.

SP1's exact search (:mod:`cascadeserve.planner.search`) extends each prefix of a cascade by one stage at every
threshold level of the next model. For prefix ``i`` (its still-unsure samples ``reach[i]``) and level ``j`` (the
model's unsure samples ``un[j]`` at that threshold) it needs

* how many samples stay unsure (``|reach ∧ un|``),
* how many the new stage answers correctly (``|reach ∧ ¬un ∧ correct|``),
* how many of the unsure ones some later model gets right (``|reach ∧ un ∧ oracle|``, the accuracy bound).

With numpy each of these materialises a ``prefixes × levels × words`` array; here one compiled pass computes the
three counts per pair without it (the bitsets of the pairs SP1 keeps are built afterwards, for those rows only).
Sets are rows of 64-bit words whose padding bits are zero. The popcount is the branch-free SWAR sum, which LLVM
turns into the CPU's popcount instruction. The kernel is compiled on first use (``numba.njit(cache=True)``, on
disk where the package's ``__pycache__`` or ``NUMBA_CACHE_DIR`` is writable, otherwise once per process).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["extend_counts"]

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_S1, _S2, _S4, _S56 = np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(56)
_KERNEL: list[Any] = []


def _counts(
    reach: np.ndarray, un: np.ndarray, correct: np.ndarray, oracle: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, w = reach.shape
    n_lv = un.shape[0]
    still = np.empty(p * n_lv, np.int64)
    right = np.empty(p * n_lv, np.int64)
    bound = np.empty(p * n_lv, np.int64)
    for i in range(p):
        for j in range(n_lv):
            a = np.uint64(0)
            b = np.uint64(0)
            c = np.uint64(0)
            for k in range(w):
                r = reach[i, k]
                u = un[j, k]
                for which in range(3):
                    if which == 0:
                        x = r & u
                    elif which == 1:
                        x = r & ~u & correct[k]
                    else:
                        x = r & u & oracle[k]
                    x = x - ((x >> _S1) & _M1)
                    x = (x & _M2) + ((x >> _S2) & _M2)
                    x = (((x + (x >> _S4)) & _M4) * _H01) >> _S56
                    if which == 0:
                        a += x
                    elif which == 1:
                        b += x
                    else:
                        c += x
            still[i * n_lv + j] = a
            right[i * n_lv + j] = b
            bound[i * n_lv + j] = c
    return still, right, bound


def _kernel() -> Any:
    if not _KERNEL:
        import numba
        from numba.core.caching import FunctionCache

        try:
            FunctionCache(_counts)  # type: ignore[no-untyped-call]  # raises when numba finds no cache location
            _KERNEL.append(numba.njit(cache=True)(_counts))
        except RuntimeError:
            _KERNEL.append(numba.njit(_counts))
    return _KERNEL[0]


def extend_counts(
    reach: np.ndarray, un: np.ndarray, correct: np.ndarray, oracle: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row ``i * len(un) + j``: ``(|reach[i] ∧ un[j]|, |reach[i] ∧ ¬un[j] ∧ correct|, |reach[i] ∧ un[j] ∧
    oracle|)``; every argument is uint64 words (``reach`` ``[p, w]``, ``un`` ``[levels, w]``, the others ``[w]``)."""
    out: tuple[np.ndarray, np.ndarray, np.ndarray] = _kernel()(
        np.ascontiguousarray(reach),
        np.ascontiguousarray(un),
        np.ascontiguousarray(correct),
        np.ascontiguousarray(oracle),
    )
    return out
