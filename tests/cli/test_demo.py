"""``cascadeserve demo --quick`` end to end: train, profile, plan, serve real models, replay, plot (under 2 min)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cascadeserve.cli import run

pytest.importorskip("torch")
pytest.importorskip("sklearn")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_quick_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CASCADESERVE_CACHE_DIR", str(tmp_path / "cache"))  # a fresh machine: nothing cached
    out = tmp_path / "reports"
    t0 = time.perf_counter()
    code = run(["demo", "--quick", "--out", str(out)])
    elapsed = time.perf_counter() - t0
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert elapsed < 120, f"demo --quick took {elapsed:.0f} s"
    text = captured.out
    assert "gear switches" in text and "cascadeserve: p95" in text and "DynBa" in text
    assert " 0 lost" in text
    for name in ("frontier.png", "gear_plan.png", "timeline.png", "plan.json", "models.yaml"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
