"""How far a profile's runtimes can be trusted: the notes its curves and timing facts raise, what plan says about a
profile, when timing stops repeating, and the ``timing`` and ``notes`` entries of ``profile.yaml`` (optional: a
profile without them still loads)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.errors import ProfileError
from cascadeserve.models.timing import point_noise, relative_ci, repeat_until_stable
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile, save_profile
from cascadeserve.profile.noise import ModelTiming, PointNoise, measurement_notes, plan_warnings


def _profile(*models: ModelProfile, calibration: str = "", notes: tuple[str, ...] = ()) -> Profile:
    n = 4
    return Profile(
        name="p",
        models=models,
        sample_ids=np.arange(n),
        labels=np.zeros(n, dtype=np.int64),
        predictions=np.zeros((len(models), n), dtype=np.int64),
        certainties=np.full((len(models), n), 0.5),
        calibration=calibration,
        notes=notes,
    )


def _model(name: str, ms: dict[int, float], timing: ModelTiming | None = None) -> ModelProfile:
    return ModelProfile(name, 1.0, RuntimeCurve.from_mapping(ms), timing=timing)


def _points(ci: float, stable: bool = True, runs: int = 15) -> dict[int, PointNoise]:
    return {b: PointNoise(runs, ci, ci * 2, stable) for b in (1, 2, 4)}


def test_a_curve_that_falls_by_more_than_its_noise_is_noted_and_one_within_it_is_not() -> None:
    quiet = ModelTiming(_points(0.02))
    falls = _model("falls", {1: 4.0, 2: 1.0, 4: 1.5}, quiet)
    within = _model("within", {1: 1.0, 2: 0.97, 4: 1.2}, quiet)  # 3 % down, each point ±2 %
    noisy = _model("noisy", {1: 1.0, 2: 0.7, 4: 1.2}, ModelTiming(_points(0.2)))  # 30 % down, each point ±20 %
    notes = measurement_notes(_profile(falls, within, noisy))
    assert notes == (
        "model 'falls': runtime falls from 4.000 ms @ b=1 to 1.000 ms @ b=2, more than the noise (a larger batch "
        "measured cheaper)",
    )
    # without measured intervals a fall of more than 10 % is one
    assert len(measurement_notes(_profile(_model("imported", {1: 1.0, 2: 0.85})))) == 1
    assert measurement_notes(_profile(_model("imported", {1: 1.0, 2: 0.95}))) == ()


def test_near_zero_runtimes_unstable_points_and_a_busy_host_are_noted() -> None:
    points = {1: PointNoise(60, 0.12, 0.4, False), 2: PointNoise(20, 0.03, 0.1, True)}
    unstable = _model("u", {1: 1.0, 2: 1.5}, ModelTiming(points, 0.1, 1.2, cpus=2, threads=1))
    zero = _model("z", {1: 0.5, 64: 0.0001})
    busy = _model("b", {1: 1.0, 2: 1.5}, ModelTiming({}, 3.1, 3.5, cpus=4, threads=1))
    notes = measurement_notes(_profile(unstable, zero, busy))
    assert notes[0] == "model 'u': runtime not stable to ±5% after 60 runs at b=1 (±12%)"
    assert notes[1] == "model 'z': near-zero runtime 0.0001 ms @ b=64 (under 1 µs: not a measurement)"
    # the load after measuring counts the measuring process's own thread: 1.2 - 1 on 2 cores is quiet
    assert notes[2].startswith("model 'z': runtime falls from 0.500 ms @ b=1 to 0.000 ms @ b=64")
    assert notes[3] == (
        "host busy while measuring 'b': load up to 0.78 per core on 4 core(s), above 0.7; runtimes may be inflated "
        "and noisy: measure again on a quiet host"
    )
    assert len(notes) == 4


def test_plan_warns_one_line_for_an_uncalibrated_profile_and_one_for_its_notes() -> None:
    m = _model("m", {1: 1.0, 2: 1.5})
    assert plan_warnings(_profile(m, calibration="runtimes m x1.3 as measured on this host")) == []
    (line,) = plan_warnings(_profile(m))
    assert line.startswith("profile 'p' was never calibrated to a serving host")
    warned = plan_warnings(_profile(m, calibration="x", notes=("model 'm': a", "model 'm': b")))
    assert warned == ["profile 'p' carries 2 measurement notes: model 'm': a | model 'm': b"]


def test_timing_repeats_until_the_mean_is_known_or_the_budget_is_spent() -> None:
    steady = itertools.repeat(2.0)
    assert repeat_until_stable(lambda: next(steady), least=5, most=40, target=0.05, budget_s=60) == [2.0] * 5
    swings = itertools.cycle([1.0, 3.0])
    runs = repeat_until_stable(lambda: next(swings), least=5, most=12, target=0.05, budget_s=60)
    assert len(runs) == 12  # a mean of 2 ± 1 is not known to ±5 % in 12 runs
    noise = point_noise(runs, 0.05)
    assert noise.runs == 12 and not noise.stable and noise.ci is not None and noise.ci > 0.05
    assert noise.cv == pytest.approx(np.std(runs, ddof=1) / 2.0)
    assert relative_ci([1.0]) is None and not point_noise([1.0], 0.05).stable
    # enough runs make even a swinging mean known (t ≈ 1.97 · sd 1 / √n ≤ 5 % of 2: n ≥ 390)
    many = repeat_until_stable(lambda: next(swings), least=5, most=10_000, target=0.05, budget_s=60)
    assert 380 <= len(many) <= 420


def test_timing_and_notes_round_trip_and_a_profile_without_them_loads(toy_profile: Profile, tmp_path: Path) -> None:
    first = toy_profile.models[0]
    points = {b: PointNoise(15, 0.031, 0.12, True) for b in first.runtime.batch_sizes}
    points[first.runtime.batch_sizes[0]] = PointNoise(1, None, 0.0, False)
    timing = ModelTiming(points, 0.25, 1.5, cpus=8, threads=2, target=0.1)
    notes = ("model 'm0': runtime not stable to ±10% after 15 runs at b=1", "host busy: µs")
    prof = dataclasses.replace(
        toy_profile, models=(dataclasses.replace(first, timing=timing), *toy_profile.models[1:]), notes=notes
    )
    save_profile(prof, tmp_path / "p")
    text = (tmp_path / "p" / "profile.yaml").read_text(encoding="utf-8")
    assert "±10%" in text and "{runs: 15, ci: 0.031, cv: 0.12, stable: true}" in text  # readable, one line a point
    back = load_profile(tmp_path / "p")
    assert back.notes == notes and back.model(first.name).timing == timing
    assert back.models[1].timing is None

    plain = tmp_path / "plain"  # what an older profiler wrote, or another tool: no timing, no notes
    save_profile(toy_profile, plain)
    assert "timing" not in (plain / "profile.yaml").read_text() and load_profile(plain).notes == ()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("timing: {points: {1: {runs: 3, ci: -1, cv: 0.1, stable: true}}}", "timing: points[1]: ci must be"),
        ("timing: {load: [1.0]}", "timing: load must be [before, after]"),
        ("timing: {cpus: 0}", "timing: cpus must be a positive integer"),
        ("timing: [1, 2]", "timing: timing must be a mapping"),
    ],
)
def test_a_bad_timing_entry_names_its_line(toy_profile: Profile, tmp_path: Path, entry: str, message: str) -> None:
    save_profile(toy_profile, tmp_path)
    path = tmp_path / "profile.yaml"
    lines = path.read_text(encoding="utf-8").splitlines()
    at = lines.index("  runtime_ms:")  # the first model's entry
    lines.insert(at, f"  {entry}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=re.escape(message)) as err:
        load_profile(tmp_path)
    assert f"line {at + 1}" in str(err.value)


def test_notes_must_be_a_list_of_strings(toy_profile: Profile, tmp_path: Path) -> None:
    save_profile(toy_profile, tmp_path)
    path = tmp_path / "profile.yaml"
    path.write_text("notes: {a: 1}\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ProfileError, match="notes must be a list of strings"):
        load_profile(tmp_path)
