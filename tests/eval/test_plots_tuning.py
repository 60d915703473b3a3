"""The tuning timeline figure: thresholds, agreement and work over time from a drift run's document."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
from cascadeserve.eval.plots import plot_tuning


def test_plot_tuning_draws_a_png_from_a_drift_document(tmp_path: Path) -> None:
    line = {"bucket_s": 1.0, "t": [0.0, 1.0, 2.0], "agreement": [1.0, 0.9, 0.95], "accuracy": [1.0, 0.9, 0.9],
            "work_ms_per_request": [1.0, 1.2, 1.5], "gear": [0, 0, 0], "changes": []}  # fmt: skip
    tuned = {**line, "changes": [{"t": 1.5, "gear": 0, "new": [0.8, 0.7], "reason": "below target"}]}
    doc = {"qps": 150.0, "audit": 0.1, "targets": {"0": 0.98}, "initial": {"0": [0.6, 0.6]},
           "systems": {"fixed": line, "tuned": tuned, "best alone": line}}  # fmt: skip
    out = plot_tuning(doc, tmp_path / "sub" / "tuning.png")
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
