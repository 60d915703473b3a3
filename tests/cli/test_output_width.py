"""Tables stay readable where stdout is not a terminal (a file, a pipe, CI logs): each row is one line, however
long its cells, where rich would otherwise assume 80 columns and break rows over several lines (and whatever
``COLUMNS`` says: pytest-xdist's workers set it to 80)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cli import run
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, save_profile

LONG = ("a-first-model-whose-name-alone-fills-half-a-line", "a-second-model-whose-name-is-just-as-long-as-the-first")


@pytest.fixture
def long_names(tmp_path: Path) -> Path:
    models = (
        ModelProfile(LONG[0], 100.0, RuntimeCurve((1, 8), (1.0, 4.0))),
        ModelProfile(LONG[1], 250.5, RuntimeCurve((1, 8), (5.0, 20.0))),
    )
    prof = Profile(
        "a-profile-with-a-long-name-too",
        models,
        np.array([1, 2, 3, 4]),
        np.array([0, 1, 0, 1]),
        np.array([[0, 1, 1, 0], [0, 1, 0, 0]]),
        # the first model is sure only where it is right (sample 0): a two-model cascade is on the frontier
        np.array([[0.95, 0.4, 0.3, 0.2], [0.5, 0.6, 0.7, 0.9]]),
        device="a device described at some length, as measured on a shared machine",
    )
    return save_profile(prof, tmp_path / "long")


def test_each_table_row_is_one_line_when_stdout_is_not_a_terminal(
    long_names: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["profile", "frontier", "--profile", str(long_names), "--json"]) == 0
    points = stdout_json(capsys)["frontier"]
    assert any(len(p["models"]) == 2 for p in points)  # two long names in one cell: rows over 120 columns
    assert run(["profile", "frontier", "--profile", str(long_names)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == len(points)  # no row continues on a second line
    for row, p in zip(rows, points, strict=True):
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1:] == [f"{p['accuracy']:.4f}", f"{p['work_ms']:.4f}"]
        assert cells[0].startswith(p["models"][0]) and cells[0].count(" > ") == len(p["models"]) - 1
        assert all(m in cells[0] for m in p["models"])
    assert max(len(r) for r in rows) > 120
    assert run(["profile", "show", "--profile", str(long_names)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == list(LONG)
