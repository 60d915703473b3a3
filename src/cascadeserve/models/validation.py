"""Validation data for the profiler: labelled inputs, read from a built-in family or a file.

Accepted forms (``--validation``):

* ``digits``: the digits family's held-out split (``sklearn.datasets.load_digits``, no file needed);
* ``tweets`` or ``tweets:DIR``: TweetEval sentiment's validation split (``DIR`` holds ``val_text.txt`` and
  ``val_labels.txt``; the ``[text]`` extra);
* ``FILE.npz``: arrays ``inputs`` ``[n, ...]`` and ``labels`` ``[n]``, optionally ``sample_ids`` ``[n]``;
* ``FILE.csv``: a header with ``label``, optionally ``sample_id``, and either a ``text`` column (strings) or
  numeric feature columns (every other column);
* ``FILE.jsonl``: a labelled set for LLM stages (multiple choice, BoolQ, SST-2, NQ-open, or items with
  ``prompt`` and ``options``; :mod:`cascadeserve.models.llm_prompts`), read into encoded items.

``limit`` keeps the first ``limit`` rows (a quick profile on a subset).

Labels are non-negative class indices. Every problem names the file and the row (the CSV line, or the array row)
so a user can find it: a row with the wrong number of fields, a label that is not a class index, inputs and
labels of different lengths. The profiler adds one more check once it knows a model's classes: a label outside
them is rejected naming its row (:meth:`ValidationSet.where`).

:class:`ValidationSet` and :class:`ValidationDataError` live in :mod:`cascadeserve.models.dataset` (re-exported
here), below the families that build them; this module imports a family only inside :func:`load_validation`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.dataset import ValidationDataError, ValidationSet

__all__ = ["ValidationDataError", "ValidationSet", "load_validation"]


def _label(text: str, where: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise ValidationDataError(f"{where}, column label: expected a class index, got {text!r}") from None
    if v < 0:
        raise ValidationDataError(f"{where}, column label: a class index must be >= 0, got {v}")
    return v


def _load_npz(path: Path) -> ValidationSet:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValidationDataError(f"{path}: cannot read as .npz: {e}") from None
    for key in ("inputs", "labels"):
        if key not in data:
            raise ValidationDataError(f"{path}: missing array {key!r} (has {', '.join(data.files) or 'nothing'})")
    inputs, labels = data["inputs"], data["labels"]
    if labels.ndim != 1:
        raise ValidationDataError(f"{path}: 'labels' must be 1-D, got shape {list(labels.shape)}")
    if len(inputs) != len(labels):
        short, n = ("labels", len(labels)) if len(labels) < len(inputs) else ("inputs", len(inputs))
        raise ValidationDataError(
            f"{path}: row count mismatch: 'inputs' has {len(inputs)} rows, 'labels' {len(labels)}; "
            f"row {n} has no {short[:-1]}"
        )
    if labels.dtype.kind not in "iu":
        raise ValidationDataError(f"{path}, 'labels': expected integer class indices, got dtype {labels.dtype}")
    neg = np.flatnonzero(labels < 0)
    if len(neg):
        raise ValidationDataError(f"{path}, row {int(neg[0])}, column label: a class index must be >= 0")
    ids = data["sample_ids"] if "sample_ids" in data else np.arange(len(labels), dtype=np.int64)
    if len(ids) != len(labels):
        raise ValidationDataError(f"{path}: 'sample_ids' has {len(ids)} rows, 'labels' {len(labels)}")
    return ValidationSet(inputs, labels.astype(np.int64), np.asarray(ids), str(path))


def _load_csv(path: Path) -> ValidationSet:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationDataError(f"{path}: cannot read as UTF-8 CSV: {e}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [c.strip() for c in next(reader, [])]
    if "label" not in header:
        raise ValidationDataError(f"{path}, line 1: the header needs a 'label' column, got {','.join(header)!r}")
    li = header.index("label")
    si = header.index("sample_id") if "sample_id" in header else None
    ti = header.index("text") if "text" in header else None
    feats = [i for i, c in enumerate(header) if i not in (li, si, ti)]
    if ti is None and not feats:
        raise ValidationDataError(f"{path}, line 1: need a 'text' column or numeric feature columns")
    labels: list[int] = []
    ids: list[str] = []
    texts: list[str] = []
    rows: list[list[float]] = []
    lines: list[int] = []
    for row in reader:
        if not row:
            continue
        where = f"{path}, line {reader.line_num}"
        if len(row) != len(header):
            raise ValidationDataError(f"{where}: expected {len(header)} fields, got {len(row)}")
        labels.append(_label(row[li], where))
        ids.append(row[si].strip() if si is not None else str(len(ids)))
        lines.append(reader.line_num)
        if ti is not None:
            texts.append(row[ti])
        else:
            try:
                rows.append([float(row[i]) for i in feats])
            except ValueError:
                bad = next(i for i in feats if not _is_float(row[i]))
                raise ValidationDataError(
                    f"{where}, column {header[bad]}: expected a number, got {row[bad]!r}"
                ) from None
    if not labels:
        raise ValidationDataError(f"{path}: no data rows")
    inputs: Any = texts if ti is not None else np.asarray(rows, dtype=np.float32)
    try:
        sid = np.asarray([int(s) for s in ids], dtype=np.int64)
    except ValueError:
        sid = np.asarray(ids, dtype=object)
    return ValidationSet(inputs, np.asarray(labels, dtype=np.int64), sid, str(path), tuple(lines))


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_validation(spec: str | Path, *, limit: int | None = None) -> ValidationSet:
    """Read validation data from a built-in name or a file (see the module docstring)."""
    if limit is not None and limit < 1:
        raise ValidationDataError(f"limit must be >= 1, got {limit}")
    data = _load(spec, limit)
    if limit is not None and len(data) > limit:
        idx = np.arange(limit)
        inputs = data.take(idx)
        lines = data.lines[:limit] if data.lines is not None else None
        data = ValidationSet(inputs, data.labels[:limit], data.sample_ids[:limit], data.source, lines, data.task)
    return data


def _load(spec: str | Path, limit: int | None) -> ValidationSet:
    s = str(spec)
    if s == "digits":
        from cascadeserve.models.families import digits

        return digits.validation_set()
    if s == "tweets" or s.startswith("tweets:"):
        from cascadeserve.models.families.tweets import validation_set as tweets_validation

        return tweets_validation(s.partition(":")[2] or None)
    path = Path(s)
    if not path.is_file():
        raise ValidationDataError(f"{path}: no such file (give digits, tweets[:DIR], a .npz, a .csv or a .jsonl)")
    if path.suffix == ".npz":
        return _load_npz(path)
    if path.suffix == ".csv":
        return _load_csv(path)
    if path.suffix == ".jsonl":
        from cascadeserve.models.llm_prompts import load_jsonl

        return load_jsonl(path, limit=limit)
    raise ValidationDataError(f"{path}: unknown validation format {path.suffix!r}; use .npz, .csv or .jsonl")
