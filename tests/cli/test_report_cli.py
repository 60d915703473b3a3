"""``cascadeserve report`` through the CLI entry point: the page, its tables and figures, for a tiny profile."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from tests.baselines.tiny import tiny_profile

from cascadeserve.cli import run
from cascadeserve.profile import save_profile


def test_report_writes_every_table_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "tiny"
    save_profile(tiny_profile(), prof)
    out = tmp_path / "report"
    args = ["report", "--profile", str(prof), "--trace", "synthetic:poisson:qps=300,duration=3", "--max-qps", "300"]
    args += ["--slo-p95-ms", "50,100", "--slo-accuracy", "0.7,0.9", "--systems", "cascadeserve,dynba,cocktail+"]
    args += ["--max-devices", "3", "--device-memory-mb", "100", "--jobs", "1", "--curve-devices", "1,2"]
    args += ["--out", str(out)]
    assert run(args) == 0
    assert f"wrote {out / 'README.md'}" in capsys.readouterr().out.replace("\n", "")
    page = (out / "README.md").read_text()
    for png in ("cost-grid", "curves", "timeline-sim", "ablation"):
        assert (out / f"tiny-{png}.png").stat().st_size > 1000
        assert f"(tiny-{png}.png)" in page
    assert not (out / "tiny-timeline-real.png").exists()  # only with --real
    assert shlex.join(["cascadeserve", *args]) in page and "Versions: python" in page  # the exact, rerunnable command
    assert "--max-qps 300 given" in page
    grid = json.loads((out / "tiny-compare.json").read_text())
    assert grid["systems"] == ["cascadeserve", "dynba", "cocktail+"] and len(grid["cells"]) == 4
    # every cell of the JSON is a row of the page's table, the autoscaled system with its unrounded mean
    for c in grid["cells"]:
        d = c["devices"]
        cells = [
            "—" if d["cascadeserve"] is None else str(d["cascadeserve"]),
            "—" if d["dynba"] is None else str(d["dynba"]),
            "—" if d["cocktail+"] is None else f"{d['cocktail+']} ({c['mean_devices']['cocktail+']:.2f})",
        ]
        assert " | ".join(cells) in page
