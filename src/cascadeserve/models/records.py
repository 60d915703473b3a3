"""What the profiler measured about one model (:class:`ModelRecord`), as ``measured/<model>.json`` keeps it beside
the model's predictions, and reading it back (:func:`resume_record`) for a rerun that skips the model: the record
is used only when its fingerprint (the model's config, the validation data, the options) matches, and its
predictions file is the profiler's own."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.dataset import ValidationSet
from cascadeserve.profile.timing import ModelTiming

__all__ = ["MEASURED_DIR", "ModelRecord", "resume_record"]

MEASURED_DIR = "measured"


@dataclass(frozen=True)
class ModelRecord:
    """What was measured about one model (also the content of ``measured/<model>.json``)."""

    name: str
    memory_mb: float
    memory_source: str
    runtime_ms: dict[int, float]
    accuracy: float
    classes: int
    threads: int
    fingerprint: str
    predictions: np.ndarray = field(repr=False)
    certainties: np.ndarray = field(repr=False)
    timing: ModelTiming | None = None  # how the curve was measured (None: resumed from a profiler without it)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "memory_mb": self.memory_mb,
            "memory_source": self.memory_source,
            "runtime_ms": {str(b): v for b, v in self.runtime_ms.items()},
            "accuracy": self.accuracy,
            "classes": self.classes,
            "threads": self.threads,
            "fingerprint": self.fingerprint,
        }
        if self.timing is not None:
            doc["timing"] = self.timing.to_doc()
        return doc


def resume_record(out: Path, name: str, fingerprint: str, validation: ValidationSet) -> ModelRecord | None:
    """The record of ``name`` in the profile folder ``out`` if it was measured with ``fingerprint`` on
    ``validation``'s samples; None when it must be measured (again)."""
    meta = out / MEASURED_DIR / f"{name}.json"
    pred = out / "predictions" / f"{name}.csv"
    if not meta.is_file() or not pred.is_file() or not (out / "labels.csv").is_file():
        return None
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
        timing = ModelTiming.from_doc(doc["timing"]) if isinstance(doc.get("timing"), dict) else None
    except (OSError, ValueError, AttributeError):
        return None
    if doc.get("fingerprint") != fingerprint:
        return None
    # the predictions file is ours (same sample order); anything unexpected means: measure again
    try:
        with pred.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))[1:]
        ids = [str(s) for s in validation.sample_ids.tolist()]
        if [r[0] for r in rows] != ids:
            return None
        preds = np.asarray([int(r[1]) for r in rows], dtype=np.int64)
        certs = np.asarray([float(r[2]) for r in rows], dtype=np.float64)
    except (OSError, ValueError, IndexError):
        return None
    return ModelRecord(
        name=name,
        memory_mb=float(doc["memory_mb"]),
        memory_source=str(doc["memory_source"]),
        runtime_ms={int(b): float(v) for b, v in doc["runtime_ms"].items()},
        accuracy=float(doc["accuracy"]),
        classes=int(doc["classes"]),
        threads=int(doc["threads"]),
        fingerprint=fingerprint,
        predictions=preds,
        certainties=certs,
        timing=timing,
    )
