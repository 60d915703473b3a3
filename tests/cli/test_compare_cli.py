"""``cascadeserve compare`` through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.baselines.tiny import tiny_profile
from tests.cli_json import parse_json, stdout_json

from cascadeserve.cli import run
from cascadeserve.profile import save_profile


def _args(tmp_path: Path, trace: str, *, systems: str, max_devices: int, jobs: int) -> list[str]:
    """``compare --json`` on the tiny profile (saved under ``tmp_path``), one cell: p95 ≤ 100 ms, accuracy ≥ 0.9."""
    prof = tmp_path / "tiny"
    save_profile(tiny_profile(), prof)
    args = ["compare", "--profile", str(prof), "--trace", trace, "--latency-slos", "100", "--accuracy-targets", "0.9"]
    args += ["--systems", systems, "--max-devices", str(max_devices), "--device-memory-mb", "100"]
    return [*args, "--jobs", str(jobs), "--json"]


def test_compare_charges_the_batch_overhead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _args(tmp_path, "synthetic:poisson:qps=300,duration=3", systems="dynba", max_devices=3, jobs=1)
    assert run(args) == 0
    base = stdout_json(capsys)
    assert base["batch_overhead_ms"] == 0.0
    assert run([*args, "--batch-overhead-ms", "20"]) == 0
    slow = stdout_json(capsys)
    assert slow["batch_overhead_ms"] == 20.0
    # slow (5 ms per sample) at 300 QPS: 20 ms per batch costs DynBa a device (see tests/baselines/test_overhead.py)
    assert base["cells"][0]["devices"]["dynba"] == 2
    assert slow["cells"][0]["devices"]["dynba"] == 3


def test_compare_reports_progress_on_stderr_and_keeps_the_systems_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(tmp_path, "synthetic:poisson:qps=100,duration=2", systems="ms+,dynba", max_devices=2, jobs=2)
    assert run(args) == 0
    out, err = capsys.readouterr()
    # two processes finish in either order; the result keeps the order asked for
    assert parse_json(out)["systems"] == ["ms+", "dynba"]
    assert "tiny: cost grid: ms+ done" in err and "tiny: cost grid: dynba done" in err
    assert "(2/2," in err
