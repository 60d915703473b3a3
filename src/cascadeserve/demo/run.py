"""The demo, start to finish, on the digits family and real models (nothing emulated).

1. **Train** the digits family (or load it from the cache), with a progress bar.
2. **Profile** it with the profiler (runtimes for batch sizes 1-64 on one thread per model, memory, predictions
   and certainty on the 600 validation images); the profile is cached beside the weights and resumable.
3. **Calibrate** the profile to this host: the profile was measured on an idle machine, but during the demo the
   HTTP server and the load generator share the same cores with both devices. The family is served over HTTP on
   127.0.0.1 with real images for a few seconds (``profile calibrate --models``,
   :func:`cascadeserve.eval.hostcost.measure_host_costs`) and each model's runtimes are scaled by what its
   batches measured.
4. **Plan** the calibrated profile for the default SLO (p95 ≤ 150 ms) on 2 local devices. The peak QPS is set from
   the most accurate model's calibrated capacity, so that the burst is more than that model alone can serve.
5. **Serve** the plan on 127.0.0.1 with the V2 HTTP server, the models running on one thread per device.
6. **Replay** an excerpt of the Twitter per-second counts bundled in ``cascadeserve/data/traces`` (a step from
   about 45 to about 220 tweets per second), scaled so its busiest second hits the peak, with one real image per
   request; then the **DynBa** baseline: the same load on the most accurate model alone with dynamic batching.
7. **Summarise** (gear switches, p95 and accuracy against the SLO, the baseline) and **plot** to
   ``reports/demo/`` (frontier, gear plan, timeline), with :mod:`cascadeserve.eval.run_figures`, which draws the
   same figures for ``profile frontier --plot``, ``plan --plot`` and ``bench --plot``.

The run fails (non-zero exit) if the server fails or any request of the cascadeserve run is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.demo.load import Replay, replay
from cascadeserve.eval.hostcost import measure_host_costs
from cascadeserve.eval.run_figures import plot_frontier, plot_plan, plot_timeline
from cascadeserve.http import Server, build_app
from cascadeserve.models import MeasureOptions, load_models_config, measure
from cascadeserve.models.families import digits
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.planner import Planner
from cascadeserve.profile import Profile, calibrate
from cascadeserve.runtime import load_model_config
from cascadeserve.traces import build_trace

__all__ = ["DemoOptions", "DemoResult", "run_demo", "trace_path"]

Say = Callable[[str], None]


def trace_path() -> Path:
    """The bundled Twitter excerpt (see ``cascadeserve/data/README.md``)."""
    return Path(str(resources.files("cascadeserve") / "data" / "traces" / "twitter_2021_excerpt.txt"))


@dataclass(frozen=True)
class DemoOptions:
    quick: bool = False
    out: Path = Path("reports/demo")
    slo_p95_ms: float = 150.0
    devices: int = 2
    device_memory_mb: float = 256.0
    calibrate_s: float = 6.0  # seconds of serving the family to measure this host's costs before planning
    peak_qps: float | None = None  # None: from the profile (see the module docstring)
    seed: int = 0
    baseline: bool = True

    @property
    def window(self) -> str:
        # the step up happens at second 135 of the excerpt; both windows show quiet seconds, then the burst
        return "120:15" if self.quick else "80:90"


@dataclass
class DemoResult:
    profile: Profile
    plan: GearPlan
    peak_qps: float
    cascade: Replay
    dynba: Replay | None
    figures: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.cascade.lost == 0


def _serve(profile: Profile, plan: GearPlan, models_yaml: Path, run: Callable[[str], Replay]) -> Replay:
    built = build_app(profile, plan, models=load_model_config(models_yaml), name="digits")
    with Server(built, "127.0.0.1", 0, grace_s=5.0) as server:
        return run(server.url)


def _gear_changes(r: Replay, plan: GearPlan, width: int = 5) -> list[str]:
    """The majority gear per ``width``-second bin, printed where it changes (1 s bins flicker at range edges)."""
    out: list[str] = []
    last = None
    for s in range(0, int(np.ceil(r.sent_s.max())) + 1 if len(r.sent_s) else 0, width):
        m = (r.sent_s >= s) & (r.sent_s < s + width) & (r.gear >= 0)
        if not m.any():
            continue
        g = int(np.bincount(r.gear[m]).argmax())
        if g != last:
            gear = plan.gears[g]
            qps = int(m.sum()) // width
            out.append(f"  t={s:>3}s  ~{qps:>3} QPS  gear {g}: {gear.cascade}")
            last = g
    return out


def run_demo(
    opts: DemoOptions, say: Say = print, progress: Callable[[str, int, int], None] | None = None
) -> DemoResult:
    t_all = time.perf_counter()
    timings: dict[str, float] = {}
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    facts = digits.train_family(seed=opts.seed, quick=opts.quick, progress=progress)
    timings["train_s"] = time.perf_counter() - t0
    for arch, f in facts.items():
        say(
            f"  {arch:<10} accuracy {f['accuracy']:.3f}  "
            + ("(cached)" if f["cached"] else f"(trained in {f['seconds']:.1f} s)")
        )

    t0 = time.perf_counter()
    models_yaml = digits.write_config(out / "models.yaml", seed=opts.seed, quick=opts.quick, threads=1)
    cfg = load_models_config(models_yaml)
    prof_dir = digits.cache_dir() / "digits" / digits._key(opts.seed, opts.quick) / "profile"
    batch_sizes = (1, 2, 4, 8, 16, 32, 64)
    mopts = MeasureOptions(batch_sizes=batch_sizes, repeats=5, warmup=1, threads=1, budget_s=1.0)

    def on_measure(model: str, step: str, done: int, total: int) -> None:
        if progress is not None:
            progress(f"profile {model}", done, total)

    profile, _ = measure(
        cfg, digits.validation_set(opts.seed), prof_dir, name="digits", options=mopts, progress=on_measure
    )
    timings["profile_s"] = time.perf_counter() - t0
    say(f"profile: {prof_dir}")
    for row in profile.summary():
        say(
            f"  {row['model']:<10} accuracy {row['accuracy']:.3f}  {row['runtime_ms_b1']:.3f} ms @1  "
            f"{row['runtime_ms_b64']:.2f} ms @64  {row['memory_mb']:.2f} MB"
        )

    t0 = time.perf_counter()
    _, _, xv, yv, _ = digits.split(opts.seed)
    costs = measure_host_costs(
        profile, load_model_config(models_yaml), xv, devices=opts.devices, seconds=opts.calibrate_s, name="digits"
    )
    # as `profile calibrate --models` does: the factor per batch size where the probe formed several, busy factors
    plan_prof = calibrate(
        profile, costs.factors, busy=costs.busy, sizes=costs.sizes, source=f"the demo's host ({costs.describe()})"
    )
    timings["calibrate_s"] = time.perf_counter() - t0
    say(f"calibrated to this host: {costs.describe()}")

    t0 = time.perf_counter()
    top = profile.model_names[int(np.argmax(profile.accuracies))]
    top_rt = plan_prof.model(top).runtime
    top_capacity = opts.devices * 32 / (float(top_rt.ms_at(32)) / 1000.0)
    peak = opts.peak_qps or float(np.clip(1.5 * top_capacity, 150.0, 450.0))
    devices = tuple(Device(name=f"dev{i}", memory_mb=opts.device_memory_mb) for i in range(opts.devices))
    slo = SLO(kind="p95_ms", value=opts.slo_p95_ms)
    planner = Planner(n_ranges=6 if opts.quick else 8, max_batch=64, sim_requests=1500, seed=opts.seed)
    planner.fit(plan_prof, devices, slo, peak * 1.1)
    plan = planner.plan_
    assert plan is not None
    plan.save(out / "plan.json")
    timings["plan_s"] = time.perf_counter() - t0
    say(
        f"plan: {len(plan.gears)} gears up to {plan.max_qps:.0f} QPS for {slo} on {opts.devices} devices "
        f"(most accurate model {top}: about {top_capacity:.0f} QPS at its calibrated cost); "
        f"planned in {timings['plan_s']:.1f} s"
    )
    for first, last in plan.gear_runs:  # neighbouring ranges with the same gear are one gear (no switch)
        g = plan.gears[first]
        name = f"gear {first}" if first == last else f"gears {first}-{last}"
        say(
            f"  {name}: {g.qps_low:>4.0f}-{plan.gears[last].qps_high:<4.0f} QPS  {g.cascade}  "
            f"(predicted accuracy {g.predicted_accuracy or 0:.3f})"
        )

    trace = build_trace(trace_path(), fmt="per-second", window=opts.window, max_qps=peak, seed=opts.seed)
    seconds = int(trace.duration_s)
    say(
        f"replaying {len(trace.arrivals)} requests over {seconds} s "
        f"(Twitter excerpt {opts.window}, peak {peak:.0f} QPS)"
    )

    t0 = time.perf_counter()
    cas = _serve(plan_prof, plan, models_yaml, lambda url: replay(url, "digits", trace.arrivals, xv, yv))
    timings["serve_s"] = time.perf_counter() - t0
    dyn = None
    if opts.baseline:
        say("replaying the same load on DynBa (the most accurate model alone, dynamic batching)")
        base = fixed_plan(plan_prof, Cascade((top,), ()), devices, max_qps=plan.max_qps, slo=slo, max_batch=64)
        t0 = time.perf_counter()
        dyn = _serve(plan_prof, base, models_yaml, lambda url: replay(url, "digits", trace.arrivals, xv, yv))
        timings["baseline_s"] = time.perf_counter() - t0

    figures = [
        plot_frontier(profile, out / "frontier.png", plan),
        plot_plan(plan, out / "gear_plan.png"),
        plot_timeline(
            cas,
            out / "timeline.png",
            title=f"replayed Twitter excerpt against the real digits models on {opts.devices} local devices",
            baseline=dyn,
            slo_ms=opts.slo_p95_ms,
            seconds=seconds,
            bin_s=1.0,
        ),
    ]
    timings["total_s"] = time.perf_counter() - t_all
    lines = ["gear switches (majority gear of the answered requests per 5 s):", *_gear_changes(cas, plan)]
    verdict = "meets" if cas.p95_ms() <= opts.slo_p95_ms else "MISSES"
    lines.append(
        f"cascadeserve: p95 {cas.p95_ms():.1f} ms ({verdict} the SLO of {opts.slo_p95_ms:g} ms), "
        f"accuracy {cas.accuracy():.4f}, {int(cas.ok.sum())}/{len(cas.ok)} answered, {cas.lost} lost"
    )
    if dyn is not None:
        dverdict = "meets" if dyn.p95_ms() <= opts.slo_p95_ms else "MISSES"
        lines.append(
            f"DynBa ({top}): p95 {dyn.p95_ms():.1f} ms ({dverdict} the SLO), accuracy {dyn.accuracy():.4f}, "
            f"{int(dyn.ok.sum())}/{len(dyn.ok)} answered, {dyn.lost} lost"
        )
    lines.append("figures: " + ", ".join(str(f) for f in figures))
    lines.append("timings: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    return DemoResult(profile, plan, peak, cas, dyn, figures, timings, lines)
