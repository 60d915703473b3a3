"""``cs.profile(workload)`` measures again only what changed: a model whose weights file was rewritten is measured
again and the other kept; new validation data or new profile options measure every model again. Real models: two
linear classifiers whose factory loads their weights from a cache folder (declared with ``@reads``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import cascadeserve as cs
from cascadeserve.profile import load_profile

FACTORY = """\
from pathlib import Path

import numpy as np

from cascadeserve.models.base import reads

WEIGHTS = Path(__file__).parent / "cache"


@reads(lambda file: [WEIGHTS / file])
def load(file):
    w = np.load(WEIGHTS / file)

    def predict(batch):
        return np.asarray(batch, dtype=float) @ w

    return predict
"""

WORKLOAD = """\
name: lin
models: models.yaml
pythonpath: [.]
validation: val.csv
devices: {count: 1, memory_mb: 1000}
slo: {p95_ms: 50}
max_qps: 100
profile: {batch_sizes: "1,2", repeats: REPEATS, warmup: 0, calibrate_s: 0}
"""


@pytest.fixture()
def folder(tmp_path: Path) -> Iterator[Path]:
    module = f"linear_{tmp_path.name}"
    (tmp_path / f"{module}.py").write_text(FACTORY)
    (tmp_path / "cache").mkdir()
    rng = np.random.default_rng(0)
    for name in ("m0", "m1"):
        np.save(tmp_path / "cache" / f"{name}.npy", rng.normal(size=(4, 3)))
    (tmp_path / "models.yaml").write_text(
        "models:\n"
        + "".join(
            f"  - {{name: {m}, adapter: callable, ref: '{module}:load', kwargs: {{file: {m}.npy}}}}\n"
            for m in ("m0", "m1")
        )
    )
    x = rng.normal(size=(40, 4))
    rows = [f"s{i},{i % 3}," + ",".join(f"{v:.4f}" for v in x[i]) for i in range(40)]
    (tmp_path / "val.csv").write_text("sample_id,label,f0,f1,f2,f3\n" + "\n".join(rows) + "\n")
    (tmp_path / "cascadeserve.yaml").write_text(WORKLOAD.replace("REPEATS", "2"))
    try:
        yield tmp_path
    finally:
        sys.modules.pop(module, None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def _profile(folder: Path) -> tuple[dict[str, set[str]], list[str]]:
    """Profile the workload in ``folder``: each model's progress steps, and what the step said."""
    steps: dict[str, set[str]] = {}
    said: list[str] = []

    def progress(model: str, step: str, done: int, total: int) -> None:
        steps.setdefault(model, set()).add(step)

    cs.profile(cs.Workload.from_file(folder), progress=progress, say=said.append)
    return steps, said


def test_a_rewritten_weights_file_measures_that_model_again_and_keeps_the_other(folder: Path) -> None:
    state = folder / ".cascadeserve" / "profile"
    steps, _ = _profile(folder)
    assert all("load" in steps[m] and "skip" not in steps[m] for m in ("m0", "m1"))  # the first time: both
    assert _profile(folder)[0] == {}  # up to date: nothing measured, nothing resumed
    mtimes = {m: (state / "measured" / f"{m}.json").stat().st_mtime_ns for m in ("m0", "m1")}

    retrained = np.random.default_rng(7).normal(size=(4, 3))
    np.save(folder / "cache" / "m0.npy", retrained)  # neither the models config nor the factory changed
    steps, said = _profile(folder)
    assert "load" in steps["m0"] and "skip" not in steps["m0"]
    assert steps["m1"] == {"skip"}
    assert (state / "measured" / "m1.json").stat().st_mtime_ns == mtimes["m1"]
    assert (state / "measured" / "m0.json").stat().st_mtime_ns != mtimes["m0"]
    assert f"profiling lin again into {state}: m0 changed, the other models are kept" in said
    prof = load_profile(state)  # the profile holds the retrained model's answers
    data = np.loadtxt(folder / "val.csv", delimiter=",", skiprows=1, usecols=(2, 3, 4, 5))
    assert prof.predictions[prof.index("m0")].tolist() == (data @ retrained).argmax(axis=1).tolist()
    assert prof.model("m1").timing is not None  # the kept model keeps how it was measured

    # what every model's measurement depends on: all measured again
    (folder / "val.csv").write_text((folder / "val.csv").read_text().replace("s0,0,", "s0,1,"))
    steps, _ = _profile(folder)
    assert all("load" in steps[m] and "skip" not in steps[m] for m in ("m0", "m1"))
    (folder / "cascadeserve.yaml").write_text(WORKLOAD.replace("REPEATS", "3"))
    steps, _ = _profile(folder)
    assert all("load" in steps[m] and "skip" not in steps[m] for m in ("m0", "m1"))


def test_plan_from_a_workload_says_its_profile_was_never_calibrated(folder: Path) -> None:
    workload = cs.Workload.from_file(folder)
    prof = cs.profile(workload, say=lambda line: None)
    said: list[str] = []
    cs.plan(workload, prof, say=said.append)
    warnings = [line for line in said if line.startswith("warning: ")]
    assert warnings[0] == (
        "warning: profile 'lin' was never calibrated to a serving host: plans promise quiet-machine runtimes "
        "(profile calibrate, or up with profile.calibrate_s > 0)"
    )
