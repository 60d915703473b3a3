"""Validation data as the profiler and the model families see it: :class:`ValidationSet` and its error.

This module is the bottom of :mod:`cascadeserve.models`' validation code: the built-in families
(:mod:`cascadeserve.models.families`) build a :class:`ValidationSet` from it, and
:mod:`cascadeserve.models.validation` (which reads files and dispatches to the families) sits above both, so
imports point one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cascadeserve.errors import CascadeServeError

__all__ = ["ValidationDataError", "ValidationSet"]


class ValidationDataError(CascadeServeError):
    """The validation data is malformed; the message names the file and row."""


@dataclass(frozen=True, eq=False)
class ValidationSet:
    """``inputs`` (an array ``[n, ...]`` or a list of ``n`` strings), ``labels`` ``[n]`` and ``sample_ids``; ``task``
    says what the labels mean."""

    inputs: Any
    labels: np.ndarray
    sample_ids: np.ndarray
    source: str
    lines: tuple[int, ...] | None = None  # CSV line of each row, for messages
    # "classification" (class-index labels), or an LLM set: "llm-scoring" (labels are option indices) or
    # "llm-generation" (inputs are prompts with reference answers; every label is 1, see models.llm_prompts)
    task: str = "classification"

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.labels) or len(self.sample_ids) != len(self.labels):
            raise ValidationDataError(
                f"{self.source}: {len(self.inputs)} inputs, {len(self.labels)} labels and "
                f"{len(self.sample_ids)} sample ids; they must have one row each"
            )
        if len(self.labels) == 0:
            raise ValidationDataError(f"{self.source}: no validation rows")

    def __len__(self) -> int:
        return len(self.labels)

    def where(self, i: int) -> str:
        """Where row ``i`` lives, for messages: ``file, line 17`` or ``file, row 16``."""
        if self.lines is not None:
            return f"{self.source}, line {self.lines[i]}"
        return f"{self.source}, row {i} (sample_id {self.sample_ids[i]})"

    def take(self, idx: np.ndarray) -> Any:
        """The inputs at positions ``idx`` (works for arrays and lists of strings)."""
        if isinstance(self.inputs, np.ndarray):
            return self.inputs[idx]
        return [self.inputs[int(i)] for i in idx]

    def check_classes(self, n_classes: int, model: str) -> None:
        """Reject the first label outside ``0..n_classes-1``, naming its row."""
        bad = np.flatnonzero((self.labels < 0) | (self.labels >= n_classes))
        if len(bad):
            i = int(bad[0])
            raise ValidationDataError(
                f"{self.where(i)}, column label: label {int(self.labels[i])} is outside model {model!r}'s classes "
                f"0..{n_classes - 1} ({len(bad)} such row(s))"
            )
