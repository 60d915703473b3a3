"""A model for the datatype tests: it answers a deterministic function of each row it receives, and keeps the rows.

``echo_model`` is a factory in the models config's factory form (``m0: {factory: tests.grpc.echo_models:echo_model,
kwargs: {datatype: BF16}}``), so the served model comes from a real ``models.yaml``. The label of a row is a
function of every element of it (:func:`row_label`), so a client that computes it on the rows it sent, and gets it
back, knows the server decoded each element as sent; ``seen`` keeps the batches for a direct look at what the model
received (a BF16 row as ``np.uint16`` bit patterns).
"""

from __future__ import annotations

import math

import numpy as np

CLASSES = 97  # a prime: a label that moves with any element of the row


def row_value(row: np.ndarray, datatype: str) -> int:
    """An integer that every element of ``row`` moves (Python ints, so UINT64 sums do not wrap)."""
    if datatype == "BYTES":
        return sum(i * b for i, s in enumerate(row.flat, 1) for b in str(s).encode())
    if datatype == "BF16":  # the bit patterns: the upper half of the float32 of the same value
        values = (np.asarray(row, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
        return math.floor(float(values.astype(np.float64).sum()) * 1000)
    if datatype == "BOOL":
        return sum(i for i, v in enumerate(row.flat, 1) if v)
    if np.asarray(row).dtype.kind in "iu":
        return sum(i * int(v) for i, v in enumerate(row.flat, 1))
    return math.floor(float(np.asarray(row, dtype=np.float64).sum()) * 1000)


def row_label(row: np.ndarray, datatype: str) -> int:
    return row_value(row, datatype) % CLASSES


class EchoModel:
    """``scores = model(batch)``: one-hot on each row's label; the batches it ran are in ``seen``."""

    def __init__(self, datatype: str) -> None:
        self.datatype = datatype
        self.seen: list[np.ndarray] = []

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.seen.append(np.array(batch, copy=True))
        scores = np.zeros((len(batch), CLASSES))
        scores[np.arange(len(batch)), [row_label(row, self.datatype) for row in batch]] = 1.0
        return scores


def echo_model(datatype: str) -> EchoModel:
    return EchoModel(datatype)
