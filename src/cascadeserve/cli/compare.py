"""``cascadeserve compare`` and ``cascadeserve report``: cascadeserve against the baselines (paper §6).

* ``compare``: the cost grid (Fig. 7): per system and (p95, accuracy) cell, the fewest devices that meet the cell in
  simulation; the table, the savings over the best baseline, ``--json`` and ``--plot DIR`` (heatmaps, ablations).
* ``report``: one full run per profile (cost grid, fixed-device curves, degradation timeline, ablations) written
  as a markdown page with PNGs, the command and the versions (:func:`cascadeserve.eval.write_report`).

``--batch-overhead-ms`` (both; default: the profile's recorded ``batch_overhead_ms``) charges every system a fixed
cost per batch beyond the profiled runtime: it goes into the :class:`~cascadeserve.baselines.Workload`, so every
system's plans and estimates include it. The trace scaling (``family_max_qps``) does not.

The workload (:mod:`cascadeserve.eval.shape`): on the Twitter trace (``tweets_per_second.txt``) both default to the
paper's shape, the first 20 minutes with zero seconds dropped, scaled to a peak of 7,600 QPS; whatever the user
gives (``--window``, ``--drop-zero/--keep-zero``, ``--max-qps``, or ``--capacity-devices`` for the family scaling)
wins. Otherwise, without ``--max-qps``, both scale the trace's peak to what ``--capacity-devices`` (default 4)
devices serve with the most accurate model alone in batches within half the middle latency SLO (``eval planner``
uses the same rule). The output states every choice and its source (``workload``, ``scaling``), and the number of
requests every system replays in full.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cascadeserve.baselines import LoadTime, System, Workload, all_systems
from cascadeserve.cli.common import (
    ArrivalOpt,
    DropZeroOpt,
    ProfileOverheadOpt,
    SeedOpt,
    TraceFormatOpt,
    TraceOpt,
    parse_floats,
    trace_options,
)
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, err_console, invocation, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.eval import compare as run_compare
from cascadeserve.eval import family_max_qps, run_all, write_report
from cascadeserve.eval.plots import plot_ablation, plot_heatmaps
from cascadeserve.eval.shape import WorkloadShape, workload_shape
from cascadeserve.planner import QpsDistribution
from cascadeserve.profile import Profile, load_profile
from cascadeserve.traces import build_trace, guess_format

__all__ = ["compare_cmd", "report_cmd"]

LatOpt = Annotated[str, typer.Option("--slo-p95-ms", help="Latency SLOs (p95 in ms), comma-separated.")]
AccOpt = Annotated[str, typer.Option("--slo-accuracy", help="Accuracy SLOs, comma-separated.")]
MaxDevOpt = Annotated[int, typer.Option("--max-devices", help="Largest device count to try.")]
MemOpt = Annotated[float, typer.Option("--device-memory-mb", help="Memory per device in MB.")]
JobsOpt = Annotated[int, typer.Option("--jobs", help="Systems evaluated in parallel processes.")]
SystemsOpt = Annotated[str, typer.Option("--systems", help="Comma-separated subset of the systems (default: all).")]
LoadOpt = Annotated[float, typer.Option("--cocktail-load-s", help="Cocktail+: fixed model load time in seconds.")]
CapDevOpt = Annotated[
    int | None,
    typer.Option(
        "--capacity-devices",
        help="Scale the peak to what this many devices serve with the best model (default 4; on the Twitter trace "
        "the default peak is the paper's 7,600 QPS, and giving this option asks for the family scaling instead). "
        "--max-qps wins over both.",
        min=1,
        show_default=False,
    ),
]
MaxQpsOpt = Annotated[
    float | None,
    typer.Option(
        "--max-qps",
        help="Scale the trace so its busiest second hits this (default: the Twitter trace 7,600 QPS, the paper's; "
        "other traces: see --capacity-devices).",
        show_default=False,
    ),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="START:DURATION in seconds of trace time (default: the whole trace; the Twitter trace "
        "tweets_per_second.txt: 0:1200, the paper's first 20 minutes). Nothing else shortens the replay.",
        show_default=False,
    ),
]


def _systems(names: str, load_s: float) -> list[System]:
    every = all_systems(LoadTime(fixed_s=load_s))
    if not names.strip():
        return every
    want = [n.strip() for n in names.split(",") if n.strip()]
    known = {s.name: s for s in every}
    bad = [n for n in want if n not in known]
    if bad:
        raise CascadeServeError(f"--systems: unknown {', '.join(bad)}; choose from {', '.join(known)}")
    return [known[n] for n in want]


def _qps_dist(spec: str, fmt: str | None, window: str | None) -> QpsDistribution | str:
    # The planner weights its QPS ranges by the trace's own load distribution when the trace is a file.
    if spec.startswith("synthetic:"):
        return "zipf"
    try:
        guess_format(spec) if fmt is None else fmt
    except CascadeServeError:
        return "zipf"
    return QpsDistribution("empirical", trace=spec, window=window)


def _progress(name: str) -> Callable[[str], None]:
    """Status lines on stderr while a grid or a timeline runs (minutes; stdout stays the result)."""
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        err_console.print(f"[{time.perf_counter() - t0:6.0f} s] {name}: {msg}", highlight=False, markup=False)

    return say


_SHAPE_HELP = (
    " On the Twitter trace (tweets_per_second.txt) the workload defaults to the paper's (§6.1): the first 20 minutes,"
    " zero seconds dropped, scaled to a peak of 7,600 QPS; --window, --drop-zero/--keep-zero, --max-qps and"
    " --capacity-devices override each. Every system replays every request of the window (nothing is shortened);"
    " the output states each choice, where it came from, and the number of requests."
)


@app.command(
    "compare",
    help="Minimum devices per system to meet each (p95, accuracy) cell, and cascadeserve's savings (Fig. 7)."
    + _SHAPE_HELP,
)
def compare_cmd(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    trace: TraceOpt,
    slo_p95_ms: LatOpt = "20,50,100",
    slo_accuracy: AccOpt = "",
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    max_devices: MaxDevOpt = 16,
    device_memory_mb: MemOpt = 16000.0,
    jobs: JobsOpt = 2,
    systems: SystemsOpt = "",
    cocktail_load_s: LoadOpt = 1.0,
    batch_overhead_ms: ProfileOverheadOpt = None,
    capacity_devices: CapDevOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plots: Annotated[
        Path | None, typer.Option("--plot", help="Write the heatmaps and ablation bars into this folder.")
    ] = None,
    workload: WorkloadOpt = None,
) -> None:
    """Minimum devices per system to meet each (p95, accuracy) cell, and cascadeserve's savings (Fig. 7)."""
    prof = load_profile(profile)
    accs = parse_floats(slo_accuracy, "--slo-accuracy") or _default_targets(prof)
    lats = parse_floats(slo_p95_ms, "--slo-p95-ms")
    if not lats:
        raise CascadeServeError("--slo-p95-ms: give at least one value")
    shape = workload_shape(
        trace, window=window, drop_zero=drop_zero, max_qps=max_qps, capacity_devices=capacity_devices
    )
    peak, scaling = _peak(prof, shape, lats)
    overhead = prof.batch_overhead_ms if batch_overhead_ms is None else batch_overhead_ms
    tr = trace_options(trace, trace_format, peak, shape.window, shape.drop_zero, arrival, seed).build()
    dist = _qps_dist(trace, trace_format, shape.window)
    w = Workload(prof, tr, lats, accs, device_memory_mb, dist, seed, overhead)
    described = _workload(shape, len(tr), float(tr.max_qps) if peak is None else peak)
    if not json_out:
        err_console.print(f"comparing {len(_systems(systems, cocktail_load_s))} systems on {tr!r}")
        err_console.print(described["description"], highlight=False, markup=False)
    res = run_compare(
        w, _systems(systems, cocktail_load_s), max_devices, jobs=jobs, progress=_progress(prof.name)
    ).to_dict()
    res["command"] = invocation()
    res["batch_overhead_ms"] = overhead
    res["scaling"] = scaling
    res["workload"] = described
    if plots is not None:
        plots.mkdir(parents=True, exist_ok=True)
        plot_heatmaps(res, plots / f"{prof.name}-cost-grid.png")
        plot_ablation(res, plots / f"{prof.name}-ablation.png")
    if json_out:
        print_json(res)
        return
    t = Table(title=f"{prof.name}: minimum devices per cell")
    for col in ["p95 ≤ ms", "accuracy ≥", *res["systems"], "savings"]:
        t.add_column(col)
    for c in res["cells"]:
        t.add_row(
            f"{c['p95_ms']:g}",
            f"{c['accuracy']:g}",
            *["—" if c["devices"][s] is None else str(c["devices"][s]) for s in res["systems"]],
            "—" if c["savings"] is None else f"{c['savings']:.2f}×",
        )
    console.print(t)
    extra = f"; every batch costs {overhead:g} ms more" if overhead else ""
    console.print(
        f"median savings {res['median_savings']}, min high-accuracy savings {res['min_high_accuracy_savings']}" + extra
    )
    console.print(scaling, highlight=False)
    console.print(described["description"], highlight=False, markup=False)


def _peak(prof: Profile, shape: WorkloadShape, lats: tuple[float, ...]) -> tuple[float | None, str]:
    """The trace's peak QPS and a sentence saying where it came from: ``--max-qps``, the paper's 7,600 QPS on the
    Twitter trace, a synthetic trace's own rate, or (``compare`` and ``report`` alike, and ``eval planner`` by the
    same rule) what ``capacity_devices`` devices serve with the most accurate model alone in batches within half
    the middle latency SLO."""
    if shape.max_qps is not None:
        if shape.peak_why.endswith("given"):
            return shape.max_qps, shape.peak_why
        return shape.max_qps, f"peak scaled to {shape.max_qps:g} QPS ({shape.peak_why})"
    if not shape.family_scaled:
        return None, shape.peak_why
    mid = sorted(lats)[len(lats) // 2]
    cap = shape.capacity_devices
    peak = float(round(family_max_qps(prof, cap, mid)))
    return (
        peak,
        f"peak scaled to {peak:g} QPS = what {cap} devices serve with the most accurate model "
        f"in batches within {mid:g}/2 ms",
    )


def _workload(shape: WorkloadShape, requests: int, peak: float) -> dict[str, object]:
    """The ``workload`` entry of the output: every choice, its source, and the requests each system replays."""
    return {
        **shape.to_dict(),
        "requests": int(requests),
        "peak_qps": peak,
        "description": shape.describe(requests, peak),
    }


def _default_targets(prof: Profile) -> tuple[float, ...]:
    """Four targets spread from a quarter to all of the way between the least and the most accurate model."""
    lo, hi = float(prof.accuracies.min()), float(prof.accuracies.max())
    return tuple(round(lo + k * (hi - lo) / 4, 4) for k in (1, 2, 3, 4))


@app.command(
    "report",
    help="Run everything for each profile and write a markdown report with every table and figure." + _SHAPE_HELP,
)
def report_cmd(
    profile: Annotated[list[Path], typer.Option(help="Profile directory (repeat for several).")],
    trace: TraceOpt,
    out: Annotated[Path, typer.Option(help="Output folder for README.md, PNGs and JSON.")] = Path("reports/paper"),
    slo_p95_ms: LatOpt = "20,50,100",
    slo_accuracy: AccOpt = "",
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    capacity_devices: CapDevOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    max_devices: MaxDevOpt = 16,
    device_memory_mb: MemOpt = 16000.0,
    jobs: JobsOpt = 2,
    systems: SystemsOpt = "",
    cocktail_load_s: LoadOpt = 1.0,
    batch_overhead_ms: ProfileOverheadOpt = None,
    curve_devices: Annotated[str, typer.Option(help="Device counts for the trade-off curves.")] = "1,2",
    timeline_devices: Annotated[int, typer.Option(help="Devices for each fixed-device system in the timeline.")] = 2,
    real: Annotated[
        bool, typer.Option("--runtime", help="Also run the timeline on the runtime (emulated devices).")
    ] = False,
    workload: WorkloadOpt = None,
) -> None:
    """Run everything for each profile and write a markdown report with every table and figure."""
    lats = parse_floats(slo_p95_ms, "--slo-p95-ms")
    curve = tuple(int(x) for x in parse_floats(curve_devices, "--curve-devices"))
    results = []
    for pdir in profile:
        prof = load_profile(pdir)
        accs = parse_floats(slo_accuracy, "--slo-accuracy") or _default_targets(prof)
        mid = sorted(lats)[len(lats) // 2]
        shape = workload_shape(
            trace,
            window=window,
            drop_zero=drop_zero,
            max_qps=max_qps,
            capacity_devices=capacity_devices,
            scale_synthetic=True,  # report scales synthetic traces too
        )
        found, scaling = _peak(prof, shape, lats)
        assert found is not None
        peak = found
        overhead = prof.batch_overhead_ms if batch_overhead_ms is None else batch_overhead_ms
        tr = trace_options(trace, trace_format, peak, shape.window, shape.drop_zero, arrival, seed).build()
        dist = _qps_dist(trace, trace_format, shape.window)
        w = Workload(prof, tr, lats, accs, device_memory_mb, dist, seed, overhead)
        spike = build_trace(
            f"synthetic:spike:base={peak * 0.3:.0f},peak={peak:.0f},at=20,width=10,duration=60", seed=seed
        )
        tw = Workload(prof, spike, lats, accs, device_memory_mb, "zipf", seed, overhead)
        sys_list = _systems(systems, cocktail_load_s)
        tl_dev = {s.name: (max_devices if s.autoscaled else timeline_devices) for s in sys_list}
        err_console.print(f"{prof.name}: {tr!r}")
        res, curves, tl = run_all(
            w,
            sys_list,
            tw,
            max_devices=max_devices,
            jobs=jobs,
            curve_devices=curve,
            timeline_devices=tl_dev,
            timeline_slo_ms=mid,
            real=real,
            progress=_progress(prof.name),
        )
        d = res.to_dict()
        d["scaling"] = scaling
        d["workload"] = _workload(shape, len(tr), peak)
        if overhead:
            d["scaling"] += (
                f"; every system's plans and simulations charge {overhead:g} ms per batch beyond the "
                "profiled runtime (the peak scaling does not)"
            )
        results.append((d, curves, tl))
    cmd = invocation()
    notes = "\n".join(f"- `{r[0]['profile']}`: {r[0]['scaling']}; {r[0]['workload']['description']}." for r in results)
    path = write_report(out, results, cmd, notes)
    console.print(f"wrote {path}", soft_wrap=True)
