"""The figures of one's own runs (``cascadeserve.eval.run_figures``), which the demo and ``--plot`` share: what each
figure shows, read back from its matplotlib objects (the committed profile, a fixed plan, a real load report)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from tests.http.http_helpers import serving

from cascadeserve.cascade import Cascade, enumerate_frontier
from cascadeserve.eval.loadgen import run_load
from cascadeserve.eval.run_figures import frontier_figure, plan_figure, plot_timeline, request_log, timeline_figure
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile, load_profile

REAL = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


@pytest.fixture(scope="module")
def real() -> Profile:
    return load_profile(REAL)


def _plan(prof: Profile) -> GearPlan:
    return fixed_plan(
        prof,
        Cascade(("nb-words", "lr-chars"), (0.3,)),
        (Device(name="d0", memory_mb=100),),
        slo=SLO(kind="p95_ms", value=20),
        min_queue=4,
    )


def test_frontier_figure_shows_the_given_frontier_the_models_and_the_plan(real: Profile) -> None:
    pts = enumerate_frontier(real, levels=np.round(np.linspace(0, 1, 11), 6), batch_size=1.0)
    fig = frontier_figure(real, points=pts, batch_size=1.0)
    (ax,) = fig.axes
    assert ax.get_title() == "tweets-sklearn: models (black), cascade frontier (blue)"
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "expected device ms per sample (batch 1, log scale)"
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [w for _, _, w in pts] and list(line.get_ydata()) == [a for _, a, _ in pts]
    assert [t.get_text() for t in ax.texts] == ["nb-words", "lr-words", "lr-chars"]
    with_plan = frontier_figure(real, _plan(real))
    assert with_plan.axes[0].get_title().endswith(", plan gears (red)")
    assert [t.get_text() for t in with_plan.axes[0].texts][-1] == "gear 0"


def test_plan_figure_labels_each_stage_with_its_threshold_and_trigger(real: Profile) -> None:
    fig = plan_figure(_plan(real))
    ax, ax2, _ = fig.axes
    assert ax.get_title() == "gear plan: 1 distinct gear over 1 QPS ranges (p95 ≤ 20 ms)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["nb-words", "lr-chars"]
    assert sorted(t.get_text() for t in ax.texts) == ["last q>=4", "t=0.30 q>=4"]  # one trigger for all replicas
    assert ax2.get_xlabel() == "measured QPS"


def test_timeline_of_a_real_load_report_without_labels_has_no_accuracy_panel(
    toy_profile: Profile, tmp_path: Path
) -> None:
    arrivals = np.linspace(0, 1.5, 120, endpoint=False)
    with serving(toy_profile) as server:
        report = asyncio.run(run_load(server.url, "toy", arrivals, sample_ids=toy_profile.sample_ids))
    assert report.ok == 120 and report.accuracy is None
    log = request_log(arrivals, report)
    assert log.correct is None and log.ok.all() and np.isfinite(log.latency_ms).all()
    assert set(log.gear.tolist()) == {0}
    fig = timeline_figure(log, title="a run", seconds=1.5)
    assert [ax.get_ylabel() for ax in fig.axes] == ["offered QPS", "gear", "p95 latency ms (0.15 s bins)"]
    assert fig.axes[0].get_title() == "a run"
    qps = fig.axes[0].get_lines()[0].get_ydata()
    assert len(qps) == 10 and sum(qps) * 0.15 == pytest.approx(120)  # every request counted once
    png = plot_timeline(log, tmp_path / "t.png", title="a run", slo_ms=50.0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_timeline_of_an_overloaded_run_draws_the_shed_requests_and_the_slo(toy_profile: Profile) -> None:
    arrivals = np.linspace(0, 1.0, 300, endpoint=False)  # 300 QPS against a server that admits 2 at a time
    with serving(toy_profile, max_in_flight=2) as server:
        report = asyncio.run(run_load(server.url, "toy", arrivals, sample_ids=toy_profile.sample_ids))
    assert report.shed > 0 and report.ok + report.shed == 300
    log = request_log(arrivals, report)
    assert log.shed is not None and int(log.shed.sum()) == report.shed  # type: ignore[attr-defined]
    fig = timeline_figure(log, title="overloaded", seconds=1.0, slo_ms=50.0)
    qps, _, p95 = fig.axes
    lines = {ln.get_label(): ln for ln in qps.get_lines()}
    assert set(lines) == {"offered", "shed (503)"}
    shed = np.asarray(lines["shed (503)"].get_ydata(), dtype=float)
    assert np.nansum(shed) * 0.1 == pytest.approx(report.shed)  # 0.1 s bins: every shed request counted once
    assert lines["shed (503)"].get_marker() == "x"
    slo = [ln for ln in p95.get_lines() if ln.get_label() == "SLO p95 50 ms"]
    assert len(slo) == 1 and list(slo[0].get_ydata()) == [50.0, 50.0]  # a horizontal line at the SLO


def test_timeline_of_a_run_without_sheds_draws_no_shed_series(toy_profile: Profile) -> None:
    arrivals = np.linspace(0, 0.5, 20, endpoint=False)
    with serving(toy_profile) as server:
        report = asyncio.run(run_load(server.url, "toy", arrivals, sample_ids=toy_profile.sample_ids))
    fig = timeline_figure(request_log(arrivals, report), title="quiet", seconds=0.5)
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["offered"]
