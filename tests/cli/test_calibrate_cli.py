"""``cascadeserve profile calibrate``: measured here (--models, the real HTTP server on 127.0.0.1 with real inputs)
or read from a live server (--server); the new profile's runtimes are the old ones times the measured factors."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.eval.loadgen import run_load
from cascadeserve.http import Server, build_app
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, Vote, load_profile, save_profile, with_votes

# two models that sleep 4 ms per batch whatever its size; the profile says 2 ms: a factor of 2 (and a bit)
FACTORY = """
import time
import numpy as np

def sleeper(classes=3):
    def f(batch):
        time.sleep(0.004)
        x = np.asarray(batch, dtype=float)
        return np.stack([x[:, 0], x[:, 1], x[:, 2]], axis=1)
    return f
"""


@pytest.fixture()
def family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    (tmp_path / "cs_calibrate_factories.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            certainty: margin
            input: {name: x, datatype: FP64, shape: [-1, 3]}
            models:
              - {name: a, adapter: callable, ref: "cs_calibrate_factories:sleeper"}
              - {name: b, adapter: callable, ref: "cs_calibrate_factories:sleeper"}
            """
        )
    )
    rng = np.random.default_rng(0)
    x = rng.random(size=(30, 3))
    y = x.argmax(axis=1)
    data = tmp_path / "val.csv"
    lines = ["sample_id,label,f0,f1,f2"] + [f"s{i},{y[i]}," + ",".join(f"{v:.4f}" for v in x[i]) for i in range(30)]
    data.write_text("\n".join(lines) + "\n")
    flat = RuntimeCurve((1, 64), (2.0, 2.0))
    models = [ModelProfile("a", 1.0, flat), ModelProfile("b", 1.0, flat)]
    prof = Profile.from_scores("sleepers", models, y, {"a": x, "b": x}, device="quiet machine")
    return cfg, data, save_profile(prof, tmp_path / "prof")


def test_measure_here_scales_every_model_by_what_its_batches_cost(
    family: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, data, prof_dir = family
    out = tmp_path / "host"
    argv = ["profile", "calibrate", "--profile", str(prof_dir), "--models", str(cfg), "--validation", str(data)]
    code = run([*argv, "--devices", "1", "--duration-s", "2", "--out", str(out), "--json"])
    assert code == 0, capsys.readouterr().err
    summary = stdout_json(capsys)
    before, after = load_profile(prof_dir), load_profile(out)
    for m in ("a", "b"):
        f = summary["factors"][m]
        assert 1.9 < f < 1000  # 4 ms of sleep against 2 ms profiled, plus the host's share (a busy box: x64 seen)
        sized = {int(b): v for b, v in summary["size_factors"].get(m, {}).items()}
        rt = before.model(m).runtime
        # where the probe formed enough batches of two sizes or more, each point has its own factor
        at = sorted(sized)
        factors = [f] * len(rt.ms)
        if sized:
            factors = [float(np.interp(b, at, [sized[k] for k in at])) for b in rt.batch_sizes]
        assert after.model(m).runtime.ms == pytest.approx(tuple(v * g for v, g in zip(rt.ms, factors, strict=True)))
    assert after.calibration.startswith("runtimes a ") and "this host under serving conditions" in after.calibration
    assert before.calibration == ""  # the input is never rewritten


def test_a_plan_served_as_planned_reprices_what_it_runs(
    family: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--plan``: the plan's own cascade at a quarter to all of its top QPS (not every model at up to twice the
    family's capacity, ~4,000 QPS here), and only the models it ran ``--min-batches`` times re-priced."""
    cfg, data, prof_dir = family
    prof = load_profile(prof_dir)
    plan = fixed_plan(prof, Cascade(("a",), ()), (Device(name="d0", memory_mb=1e6),), max_qps=40.0)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    out = tmp_path / "host"
    argv = ["profile", "calibrate", "--profile", str(prof_dir), "--models", str(cfg), "--validation", str(data)]
    argv += ["--plan", str(plan_file), "--duration-s", "4", "--min-batches", "10", "--out", str(out), "--json"]
    assert run(argv) == 0, capsys.readouterr().err
    summary = stdout_json(capsys)
    assert set(summary["factors"]) == {"a"}  # b is in no gear: it keeps its runtimes
    assert 1.9 < summary["factors"]["a"] < 1000
    after = load_profile(out)
    assert after.model("b").runtime == prof.model("b").runtime
    assert "plan.json as planned" in after.calibration
    steps = after.calibration.split(" QPS in 4 steps")[0].rsplit("; ", 1)[1].split("/")
    sent = sum(float(q) for q in steps)  # 10 + 20 + 30 + 40 QPS for a second each: 100 requests, Poisson
    assert 50 < sent < 160, after.calibration
    # no model of the plan ran --min-batches batches: one line naming the option, exit 2, nothing written
    argv[argv.index("--min-batches") + 1] = "100000"
    argv[argv.index("--out") + 1] = str(tmp_path / "none")
    assert run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --plan: no model of") and "--min-batches" in err[-1]
    assert not (tmp_path / "none").exists()


def test_read_a_live_servers_costs(
    family: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cascadeserve.runtime import load_model_config

    cfg, _, prof_dir = family
    prof = load_profile(prof_dir)
    plan = fixed_plan(
        prof, Cascade(("a", "b"), (1.0,)), (Device(name="d0", memory_mb=10),), slo=SLO(kind="p95_ms", value=500)
    )
    app = build_app(prof, plan, models=load_model_config(cfg), name="sleepers")
    rows = np.random.default_rng(1).random(size=(30, 3))
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as server:
        report = asyncio.run(run_load(server.url, "sleepers", np.linspace(0, 1.5, 60), rows=rows))
        assert report.ok == 60
        assert report.gear.tolist() == [0] * 60  # the load report says which gear answered (one here)
        # the client saw each answer later than the server's admission-to-answer time, by the front door
        assert 0 < report.front_door_ms <= report.front_door_p95_ms < report.p95_ms
        result = tmp_path / "bench.json"
        result.write_text(json.dumps(report.to_dict()))
        out, url = tmp_path / "live", server.url
        argv = ["profile", "calibrate", "--profile", str(prof_dir), "--url", url, "--out", str(out)]
        code = run([*argv, "--min-batches", "5", "--bench", str(result)])
        flat = tmp_path / "flat"
        assert run([*argv[:-1], str(flat), "--min-batches", "5", "--no-spread"]) == 0
    assert code == 0, capsys.readouterr().err
    assert load_profile(flat).model("a").batch_spread == 0.0  # --no-spread: the runtimes only
    after = load_profile(out)
    assert after.model("a").runtime.ms[0] > 3.8 and after.model("b").runtime.ms[0] > 3.8
    assert f"as measured on {url} (" in after.calibration and "front door" in after.calibration
    door = (after.front_door_ms, after.front_door_p95_ms)
    assert door == pytest.approx((report.front_door_ms, report.front_door_p95_ms), abs=0.006)  # JSON: 0.01 ms
    assert (after.ray_hop_ms, after.ray_hop_p95_ms) == (0.0, 0.0)  # the local backend has no process hop
    # 60 batches of each model (at least 40: enough for a p95): real sleeps scatter a little, and the profile says so
    assert 0 < after.model("a").batch_spread < 0.5 and "batch spread a σ" in after.calibration


def test_a_live_server_with_a_vote_stage_calibrates_its_members_only(
    family: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cascadeserve.plan import plan_profile
    from cascadeserve.runtime import load_model_config

    cfg, _, prof_dir = family
    prof = load_profile(prof_dir)
    vote = Vote.of(prof, ("a", "b"), "weighted")
    voted = with_votes(prof, [vote])
    plan = fixed_plan(
        voted, Cascade(("a", vote.name), (1.0,)), (Device(name="d0", memory_mb=10),), slo=SLO(kind="p95_ms", value=500)
    )
    served = plan_profile(prof, plan)  # what serve builds from the profile on disk and the plan
    assert served.model(vote.name) == voted.model(vote.name)
    app = build_app(served, plan, models=load_model_config(cfg), name="sleepers")
    rows = np.random.default_rng(1).random(size=(30, 3))
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as server:
        report = asyncio.run(run_load(server.url, "sleepers", np.linspace(0, 1.0, 40), rows=rows))
        assert report.ok == 40
        argv = ["profile", "calibrate", "--profile", str(prof_dir), "--url", server.url, "--out", str(tmp_path / "c")]
        code = run([*argv, "--min-batches", "5"])
    err = capsys.readouterr()
    assert code == 0, err.err
    assert f"vote stage {vote.name!r}: unchanged" in err.out + err.err
    after = load_profile(tmp_path / "c")
    assert after.model("a").runtime.ms[0] > 3.8 and after.model_names == ("a", "b")


def test_a_live_server_measures_how_much_slower_batches_run_on_a_busy_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Emulated devices that apply a busy factor of 2.5 (60 ms alone, 150 ms with the other device busy), loaded at
    about half their capacity so that batches start on an idle and on a busy host: the server's costs report the
    fit, and ``calibrate --url`` writes a profile with that busy factor and the runtime alone.

    A sleep overshoots by about the same time whatever its length, more on a busy machine (beside 6 busy loops,
    20 ms batches read a busy factor of 1.57 with an alone factor of 4.45 in one run); 60 ms batches keep the
    overshoot small against the batch, and the expected busy factor allows for what is left: an overshoot ``c``
    reads as alone = 1 + c/60 ms and busy = (2.5 + c/60 ms) / alone."""
    from cascadeserve.traces import poisson

    flat = RuntimeCurve((1, 64), (60.0, 60.0))
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 40)
    prof = Profile.from_scores("busy", [ModelProfile("a", 1.0, flat, busy_factor=2.5)], y, {"a": rng.random((40, 3))})
    prof_dir = save_profile(prof, tmp_path / "prof")
    devs = (Device(name="d0", memory_mb=10), Device(name="d1", memory_mb=10))
    plan = fixed_plan(prof, Cascade(("a",), ()), devs, slo=SLO(kind="p95_ms", value=2000))
    app = build_app(prof, plan, emulate=True, name="busy")
    arrivals = poisson(10.0, 12.0, seed=3).arrivals
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as server:
        report = asyncio.run(run_load(server.url, "busy", arrivals, sample_ids=np.arange(40)))
        assert report.ok == len(arrivals)
        snap = app.costs.snapshot() if app.costs is not None else {}
        out = tmp_path / "cal"
        code = run(["profile", "calibrate", "--profile", str(prof_dir), "--url", server.url, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (row,) = snap["models"]
    assert 0.2 < row["busy_share"] < 0.8  # batches started on an idle and on a busy host
    after = load_profile(out).model("a")
    alone = row["alone_factor"]
    assert 0.95 < alone < 1.3
    assert after.busy_factor == pytest.approx((2.5 + alone - 1.0) / alone, abs=0.3)  # the overshoot allowed for
    # the snapshot above and calibrate's own read of the server may see the fit a batch apart on a busy host
    assert after.runtime.ms[0] == pytest.approx(60.0 * alone, rel=0.02)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([], "give --url URL"),
        (["--url", "http://127.0.0.1:9", "--models", "m.yaml"], "give --url URL"),
        (["--url", "http://127.0.0.1:9"], "--url: cannot read"),
        (["--models", "m.yaml"], "--validation: needed with --models"),
        (["--url", "http://127.0.0.1:9", "--bench", "/nonexistent/bench.json"], "--bench: cannot read"),
        (["--url", "http://127.0.0.1:9", "--plan", "plan.json"], "--plan: needs --models"),
    ],
)
def test_bad_options_are_one_line_exit_2(
    family: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    _, _, prof_dir = family
    code = run(["profile", "calibrate", "--profile", str(prof_dir), "--out", str(tmp_path / "x"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1
    assert run(["profile", "calibrate", "--profile", str(prof_dir), "--out", str(prof_dir), "--url", "http://x"]) == 2
    assert "is the input profile" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"p95_ms": 3.0}, "has no front_door_ms"),
        ({"front_door_ms": 3.0, "front_door_p95_ms": 1.0}, "are not usable"),
        ({"front_door_ms": "x", "front_door_p95_ms": 1.0}, "has no front_door_ms"),
    ],
)
def test_a_bench_result_without_a_usable_front_door_is_one_line_exit_2(
    family: tuple[Path, Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    doc: dict[str, object],
    named: str,
) -> None:
    _, _, prof_dir = family
    result = tmp_path / "bench.json"
    result.write_text(json.dumps(doc))
    argv = ["profile", "calibrate", "--profile", str(prof_dir), "--out", str(tmp_path / "x")]
    code = run([*argv, "--url", "http://127.0.0.1:9", "--bench", str(result)])
    err = capsys.readouterr().err
    assert code == 2 and f"--bench: {result}" in err and named in err and len(err.strip().splitlines()) == 1
