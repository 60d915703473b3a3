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
    args = ["compare", "--profile", str(prof), "--trace", trace, "--slo-p95-ms", "100", "--slo-accuracy", "0.9"]
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


def _twitter(tmp_path: Path, counts: dict[int, int], seconds: int = 1300) -> str:
    """A per-second count file with the Twitter trace's name: zero everywhere but ``counts``."""
    path = tmp_path / "tweets_per_second.txt"
    row = [0] * seconds
    for s, c in counts.items():
        row[s] = c
    path.write_text(" ".join(map(str, row)) + "\n")
    return str(path)


def test_compare_defaults_to_the_paper_window_on_the_twitter_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # seconds 3 and 7 lie in the first 20 minutes; the burst at 1,250 s lies outside and must not count
    trace = _twitter(tmp_path, {3: 40, 7: 20, 1250: 500})
    args = _args(tmp_path, trace, systems="dynba", max_devices=2, jobs=1)
    assert run([*args, "--max-qps", "60"]) == 0
    w = stdout_json(capsys)["workload"]
    assert w["window"] == "0:1200" and "paper" in w["window_source"]
    assert w["drop_zero"] is True and "paper" in w["drop_zero_source"]
    assert w["peak_source"] == "--max-qps 60 given" and w["peak_qps"] == 60.0
    # two non-zero seconds (40, 20) scaled to a peak of 60: 60 + 30 requests, every one replayed
    assert w["requests"] == 90
    assert "window 0:1200 s (the paper's default" in w["description"] and "all 90 requests" in w["description"]


def test_compare_defaults_to_the_paper_peak_on_the_twitter_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _twitter(tmp_path, {5: 3})
    args = _args(tmp_path, trace, systems="dynba", max_devices=1, jobs=1)
    assert run(args) == 0
    out = stdout_json(capsys)
    assert out["workload"]["peak_qps"] == 7600.0 and out["workload"]["requests"] == 7600
    assert out["scaling"] == "peak scaled to 7600 QPS (the paper's default for the Twitter trace, §6.1)"
