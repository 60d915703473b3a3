"""``cascadeserve profile measure``: the profile it writes is read back by load_profile; resume; bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cli import run
from cascadeserve.models import MeasureOptions, load_models_config, load_validation, measure
from cascadeserve.models.profiler import timed_mean
from cascadeserve.profile import load_profile

FACTORY = """
import numpy as np

def linear(seed=0, classes=3):
    w = np.random.default_rng(seed).normal(size=(4, classes))
    def f(batch):
        return np.asarray(batch, dtype=float) @ w
    return f


def content_cost():
    # like a text model: a batch costs what its longest sample costs; sample 0 is short, every other one long
    import time
    def f(batch):
        if np.asarray(batch, dtype=float)[:, 0].max() > 0:
            time.sleep(0.004)
        return np.zeros((len(batch), 3)) + np.arange(3)
    return f


def padded_cost():
    # like a text encoder: a batch is padded to its longest input and costs 2 ms per token of it (far above the
    # few ms a busy host adds to a sleep, which flattened a 0.5 ms price's fit beside the suite)
    import time
    def f(batch):
        time.sleep(0.002 * np.asarray(batch, dtype=float)[:, 0].max())
        return np.zeros((len(batch), 3)) + np.arange(3)
    return f


def count_f0(batch):
    return np.asarray(batch, dtype=float)[:, 0].astype(int)


def count_one(batch):
    return [1]


def falls():
    # a batch of one costs 20 ms, every larger batch 1 ms: the curve falls, by far more than a busy host's noise
    import time
    def f(batch):
        time.sleep(0.020 if len(batch) == 1 else 0.001)
        return np.zeros((len(batch), 3)) + np.arange(3)
    return f


def jittery():
    # 1 ms and 6 ms by turns: the mean is not known to within 5 % after a few runs
    import itertools, time
    delays = itertools.cycle([0.001, 0.006])
    def f(batch):
        time.sleep(next(delays))
        return np.zeros((len(batch), 3)) + np.arange(3)
    return f


def idle_sensitive():
    # like a GPU that went idle: a call more than 20 ms after the last one takes 5 ms longer
    import time
    last = [0.0]
    def f(batch):
        if time.perf_counter() - last[0] > 0.02:
            time.sleep(0.005)
        last[0] = time.perf_counter()
        return np.zeros((len(batch), 3)) + np.arange(3)
    return f
"""


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    (tmp_path / "cs_measure_factories.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            certainty: margin
            threads: 1
            models:
              - {name: a, adapter: callable, ref: "cs_measure_factories:linear", kwargs: {seed: 1}, memory_mb: 5}
              - {name: b, adapter: callable, ref: "cs_measure_factories:linear", kwargs: {seed: 2}}
            """
        )
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4))
    y = rng.integers(0, 3, 40)
    data = tmp_path / "val.csv"
    lines = ["sample_id,label,f0,f1,f2,f3"] + [f"s{i},{y[i]}," + ",".join(f"{v:.4f}" for v in x[i]) for i in range(40)]
    data.write_text("\n".join(lines) + "\n")
    return cfg, data


def test_measure_writes_a_profile_that_load_profile_reads(setup: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg, data = setup
    out = tmp_path / "prof"
    argv = ["profile", "measure", "--models", str(cfg), "--validation", str(data), "--out", str(out)]
    code = run([*argv, "--batch-sizes", "1,2,4,...,16", "--repeats", "2", "--json"])
    assert code == 0, capsys.readouterr().err
    summary = stdout_json(capsys)
    prof = load_profile(out)
    assert prof.model_names == ("a", "b") and prof.n_samples == 40
    assert prof.model("a").memory_mb == 5.0  # the config hint wins
    assert prof.model("b").runtime.batch_sizes == (1, 2, 4, 8, 16)
    assert "1 intra-op thread" in prof.device
    assert [m["model"] for m in summary["models"]] == ["a", "b"]
    assert np.all((prof.certainties >= 0) & (prof.certainties <= 1))
    # resumable: a second run measures nothing again
    before = (out / "measured" / "a.json").stat().st_mtime_ns
    assert run([*argv, "--batch-sizes", "1,2,4,...,16", "--repeats", "2", "--json"]) == 0
    assert (out / "measured" / "a.json").stat().st_mtime_ns == before


def test_measure_api_reports_skips_on_resume(setup: tuple[Path, Path], tmp_path: Path) -> None:
    cfg_path, data = setup
    cfg = load_models_config(cfg_path)
    val = load_validation(data)
    opts = MeasureOptions(batch_sizes=(1, 4), repeats=1, warmup=0)
    measure(cfg, val, tmp_path / "p", options=opts)
    steps: list[tuple[str, str]] = []
    prof, records = measure(cfg, val, tmp_path / "p", options=opts, progress=lambda m, s, d, t: steps.append((m, s)))
    assert steps == [("a", "skip"), ("b", "skip")]
    assert [r.name for r in records] == ["a", "b"] and prof.n_samples == 40


def test_label_outside_the_models_classes_names_the_row(setup: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg, data = setup
    lines = data.read_text().splitlines()
    lines[7] = "s6,5," + lines[7].split(",", 2)[2]
    data.write_text("\n".join(lines) + "\n")
    code = run(["profile", "measure", "--models", str(cfg), "--validation", str(data), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "line 8" in err and "label 5 is outside model 'a'" in err and "0..2" in err


def test_row_count_mismatch_in_npz_names_the_row(setup: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg, _ = setup
    npz = tmp_path / "val.npz"
    np.savez(npz, inputs=np.zeros((10, 4)), labels=np.zeros(9, dtype=np.int64))
    code = run(["profile", "measure", "--models", str(cfg), "--validation", str(npz), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "row count mismatch" in err and "'inputs' has 10 rows, 'labels' 9" in err and "row 9 has no label" in err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("s3,1,0.1,0.2", "line 5: expected 6 fields, got 4"),
        ("s3,x,0.1,0.2,0.3,0.4", "line 5, column label: expected a class index, got 'x'"),
        ("s3,1,0.1,oops,0.3,0.4", "line 5, column f1: expected a number, got 'oops'"),
        ("s3,-1,0.1,0.2,0.3,0.4", "line 5, column label: a class index must be >= 0"),
    ],
)
def test_bad_csv_rows_are_named(setup: tuple[Path, Path], line: str, message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg, data = setup
    lines = data.read_text().splitlines()
    lines[4] = line
    data.write_text("\n".join(lines) + "\n")
    code = run(["profile", "measure", "--models", str(cfg), "--validation", str(data), "--out", str(data.parent / "o")])
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_batch_sizes_and_missing_validation(setup: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg, data = setup
    base = ["profile", "measure", "--models", str(cfg), "--out", str(tmp_path / "o")]
    assert run([*base, "--validation", str(data), "--batch-sizes", "4,2"]) == 2
    assert "--batch-sizes" in capsys.readouterr().err
    assert run([*base, "--validation", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


def _one_model_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, factory: str, f0: list[int]) -> list[str]:
    """``profile measure`` argv for one model ``m`` built by ``factory`` on rows whose feature is ``f0``."""
    (tmp_path / "cs_measure_factories.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "models.yaml"
    cfg.write_text(f'models:\n  - {{name: m, adapter: callable, ref: "cs_measure_factories:{factory}"}}\n')
    data = tmp_path / "val.csv"
    data.write_text("sample_id,label,f0\n" + "".join(f"s{i},{i % 3},{v}\n" for i, v in enumerate(f0)))
    return ["profile", "measure", "--models", str(cfg), "--validation", str(data), "--batch-sizes", "1,2"]


def test_pause_times_each_batch_after_the_device_went_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _one_model_argv(tmp_path, monkeypatch, "idle_sensitive", list(range(12)))
    argv += ["--repeats", "3", "--json"]
    assert run([*argv, "--out", str(tmp_path / "busy")]) == 0
    busy = load_profile(tmp_path / "busy").model("m").runtime
    assert max(busy.ms_at(1), busy.ms_at(2)) < 2.5  # back to back: never idle long enough to slow down
    out = tmp_path / "idle"
    assert run([*argv, "--out", str(out), "--pause-ms", "30"]) == 0
    idle_profile = load_profile(out)
    idle = idle_profile.model("m").runtime
    assert min(idle.ms_at(1), idle.ms_at(2)) >= 5.0  # every timed run came after an idle device
    assert idle_profile.source.endswith(", 30 ms idle before each timed batch")
    # a pause is part of what was measured: the same --out measured without it is measured again
    before = (out / "measured" / "m.json").stat().st_mtime_ns
    assert run([*argv, "--out", str(out)]) == 0
    assert (out / "measured" / "m.json").stat().st_mtime_ns != before
    assert load_profile(out).model("m").runtime.ms_at(1) < 2.5


def test_batches_are_timed_on_random_content_not_the_first_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = _one_model_argv(tmp_path, monkeypatch, "content_cost", [-1] + [1] * 39)
    assert run([*argv, "--repeats", "5", "--json", "--out", str(tmp_path / "p")]) == 0
    rt = load_profile(tmp_path / "p").model("m").runtime
    # the first sample alone costs nothing: timed on it, batch 1 read ~0 ms; drawn at random it is long 39 times in 40
    assert rt.ms_at(1) >= 3.0 and rt.ms_at(2) >= 3.0


def test_timed_mean_leaves_out_one_stall_from_five_runs() -> None:
    assert timed_mean([1.0, 2.0, 3.0]) == 2.0  # too few runs to call one a stall
    assert timed_mean([1.0, 1.0, 2.0, 2.0, 50.0]) == 1.5


def test_a_profiles_source_carries_no_machine_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadeserve.models.profiler import _portable

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    assert _portable(f"{checkout}/data/val.csv") == "data/val.csv"
    assert _portable(f"{tmp_path}/shared/data/val.csv") == "../shared/data/val.csv"  # data beside the checkout
    assert _portable("tweets:../shared/x") == "tweets:../shared/x"


def test_a_tokens_hook_prices_each_batch_by_its_longest_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model with a ``tokens`` hook (a text encoder) gets a token cost model fitted on the timed batches: a fixed
    part and a price per token of the batch's longest input; the simulator then charges a long input more."""
    from cascadeserve.cascade import Cascade
    from cascadeserve.plan import Device, fixed_plan
    from cascadeserve.profile.vote import vote_front
    from cascadeserve.simulate import simulate

    f0 = [2 + (i * 7) % 19 for i in range(40)]  # 2..20 tokens
    argv = _one_model_argv(tmp_path, monkeypatch, "padded_cost", f0)
    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        'models:\n  - {name: m, adapter: callable, ref: "cs_measure_factories:padded_cost",'
        ' tokens: "cs_measure_factories:count_f0"}\n'
    )
    assert run([*argv, "--repeats", "8", "--json", "--out", str(tmp_path / "p")]) == 0
    prof = load_profile(tmp_path / "p")
    tc = prof.model("m").tokens
    assert tc is not None and tc.costs.task == "encode"
    assert tc.prompt_tokens.tolist() == f0 and not tc.output_tokens.any() and not tc.scored_tokens.any()
    # 2 ms per token of the longest, and sleep's own overshoot in the fixed part; a busy host's noise flattens the
    # fit (a 0.5 ms price read 0.26 beside 6 busy loops), so the bound asks only that tokens are clearly priced
    for b in (1, 2):
        assert 0.6 <= tc.costs.prefill_ms_per_token[b] <= 6.0 and tc.costs.fixed_ms[b] >= 0
    assert [v.members for v, _, _ in vote_front(prof)] == [("m",)]  # an encoder still votes: its answers are labels
    plan = fixed_plan(prof, Cascade(("m",), ()), [Device(name="d0", memory_mb=1e6)])
    arrivals = np.arange(2) * 1.0  # far apart: one batch of one each
    short, long = (f0.index(2), f0.index(20))
    res = simulate(prof, plan, arrivals, samples=np.array([short, long]))
    lat = (res.finish - res.arrivals) * 1000.0
    # the rule keeps the runtime curve's mean over random batches and splits it as fitted (profile/tokens.py)
    per_token = tc.costs.prefill_ms_per_token[1] / tc.costs.batch_ms(1, tc.prompt_tokens.mean(), 0.0)
    assert lat[1] - lat[0] == pytest.approx(18 * per_token * prof.model("m").runtime.ms_at(1), rel=1e-6)
    assert lat[1] - lat[0] > 0.5 * (lat[0] + lat[1]) / 2  # and a 20-token input clearly costs more than a 2-token one


def test_a_tokens_hook_that_miscounts_is_one_line_naming_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _one_model_argv(tmp_path, monkeypatch, "padded_cost", [3] * 10)
    (tmp_path / "models.yaml").write_text(
        'models:\n  - {name: m, adapter: callable, ref: "cs_measure_factories:padded_cost",'
        ' tokens: "cs_measure_factories:count_one"}\n'
    )
    assert run([*argv, "--out", str(tmp_path / "p")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]  # after progress
    assert len(errors) == 1 and "model 'm': its tokens hook returned (1,) values for 10 inputs" in errors[0]


def test_measure_records_each_points_noise_and_warns_of_a_falling_curve_and_unsettled_runtimes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each batch size is timed until its mean is known to ±5 % or --max-repeats ran; the profile records how each
    point went and the host's load, and notes what looks wrong, which profile measure prints as warnings."""
    import json
    import os

    argv = _one_model_argv(tmp_path, monkeypatch, "falls", [1] * 12)
    (tmp_path / "models.yaml").write_text(
        'models:\n  - {name: m, adapter: callable, ref: "cs_measure_factories:falls"}\n'
        '  - {name: j, adapter: callable, ref: "cs_measure_factories:jittery"}\n'
    )
    out = tmp_path / "p"
    argv += ["--repeats", "3", "--max-repeats", "8", "--json", "--out", str(out)]
    assert run(argv) == 0
    captured = capsys.readouterr()
    prof = load_profile(out)
    for name in ("m", "j"):
        timing = prof.model(name).timing
        assert timing is not None and set(timing.points) == {1, 2} and timing.cpus == os.cpu_count()
        assert timing.load_before is not None and timing.load_after is not None  # os.getloadavg on Linux
        for p in timing.points.values():
            assert 3 <= p.runs <= 8 and p.ci is not None and p.stable == (p.ci <= 0.05) and p.cv >= 0
    jittery = prof.model("j").timing
    assert jittery is not None and all(p.runs == 8 and not p.stable for p in jittery.points.values())
    falls = [n for n in prof.notes if n.startswith("model 'm': runtime falls from ")]
    assert len(falls) == 1 and "ms @ b=1 to " in falls[0] and "ms @ b=2, more than the noise" in falls[0]
    unsettled = [n for n in prof.notes if n.startswith("model 'j': runtime not stable to ±5% after 8 runs at b=1 (±")]
    assert len(unsettled) == 1 and ", b=2 (±" in unsettled[0]
    assert json.loads(captured.out)["notes"] == list(prof.notes)
    warned = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert warned == [f"warning: {n}" for n in prof.notes]

    # resumed, a model keeps how it was measured, and the profile its notes
    before = (out / "measured" / "j.json").stat().st_mtime_ns
    assert run(argv) == 0
    assert (out / "measured" / "j.json").stat().st_mtime_ns == before
    again = load_profile(out)
    assert again.notes == prof.notes and again.model("j").timing == jittery
