"""One full evaluation run and the markdown page that shows it (``cascadeserve report``).

:func:`family_max_qps` is the trace scaling used for the committed runs: the peak QPS is what ``devices`` devices
can serve with the family's most accurate model, in the largest batches that run within half of a latency SLO.
Scaling to the family's capacity keeps the comparison non-trivial (the paper scaled its traces for the same reason)
without looking at any system's results.

:func:`write_report` writes ``README.md`` with every table (cost grid, savings, per-system settings, timeline
summary), the PNGs next to it, the exact command, and the versions of Python and the libraries.
"""

from __future__ import annotations

import json
import platform
import statistics
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from cascadeserve.baselines import BASELINES, OURS, System, Workload, batch_for_latency
from cascadeserve.eval.grid import CompareResult, compare
from cascadeserve.eval.plots import plot_ablation, plot_curves, plot_heatmaps, plot_timeline
from cascadeserve.eval.timeline import degradation, trade_off_curves
from cascadeserve.profile import Profile

__all__ = ["claims_table", "family_max_qps", "grid_table", "run_all", "versions", "write_report"]


def family_max_qps(profile: Profile, devices: int, latency_ms: float) -> float:
    """Peak QPS that ``devices`` devices serve with the most accurate model in batches within ``latency_ms / 2``."""
    best = profile.models[int(profile.accuracies.argmax())]
    b = batch_for_latency(best, latency_ms / 2.0)
    return float(devices * b / (float(best.runtime.ms_at(b)) / 1000.0))


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("cascadeserve", "numpy", "scipy", "matplotlib", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def grid_table(result: dict[str, Any]) -> str:
    """The cost grid as a markdown table: one row per cell, one column per system, and the savings. An autoscaled
    system's count (its time-mean, rounded up) is followed by the mean itself, e.g. ``2 (1.23)``."""
    systems = result["systems"]
    head = "| p95 ≤ ms | accuracy ≥ | " + " | ".join(systems) + " | savings |"
    sep = "|" + "---|" * (len(systems) + 3)
    rows = [head, sep]

    def count(c: dict[str, Any], s: str) -> str:
        d, mean = c["devices"][s], c.get("mean_devices", {}).get(s)
        return "—" if d is None else (str(d) if mean is None else f"{d} ({mean:.2f})")

    for c in result["cells"]:
        vals = [count(c, s) for s in systems]
        sv = "—" if c["savings"] is None else f"{c['savings']:.2f}×"
        hi = " (high)" if c["high_accuracy"] else ""
        rows.append(f"| {c['p95_ms']:g} | {c['accuracy']:g}{hi} | " + " | ".join(vals) + f" | {sv} |")
    return "\n".join(rows)


def claims_table(result: dict[str, Any]) -> list[str]:
    """The paper's claim beside this run, cell by cell: cascadeserve's savings over the best baseline (the paper:
    2-3x for most cells, little at low accuracy), which other systems (baselines or ablations) needed fewer
    devices, and whether a cascade of two or more models can reach the cell's accuracy at all."""
    others = [s for s in result["systems"] if s != OURS]
    lines = [
        "### The paper's claim and this run, cell by cell",
        "",
        "The paper (§6.3, Fig. 7): for most cells cascadeserve needs 2-3× fewer devices than the best baseline; at "
        "low accuracy the task is trivial and the systems differ little. *Single-model bound*: no cascade of two or "
        "more models on the planner's frontier reaches the cell's accuracy, so no cascade can beat the best single "
        "model there (any saving comes from switching).",
        "",
        "| p95 ≤ ms | accuracy ≥ | cascadeserve | best baseline | savings | vs the claim | needs fewer devices "
        "than cascadeserve | a cascade reaches the target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        ours = c["devices"].get(OURS)
        base = [c["devices"][b] for b in BASELINES if c["devices"].get(b) is not None]
        sv = c["savings"]
        verdict = "—" if sv is None else ("2× or more" if sv >= 2.0 else ("less than 2×" if sv >= 1.0 else "worse"))
        if ours is not None and not base:
            verdict = "only cascadeserve reaches it"
        beat = [s for s in others if c["devices"].get(s) is not None and (ours is None or c["devices"][s] < ours)]
        reach = "yes" if c.get("cascade_reaches", True) else "**no: single-model bound**"
        lines.append(
            f"| {c['p95_ms']:g} | {c['accuracy']:g} | {'—' if ours is None else ours} | "
            f"{min(base) if base else '—'} | {'—' if sv is None else f'{sv:.2f}×'} | {verdict} | "
            f"{', '.join(beat) or 'none'} | {reach} |"
        )
    return [*lines, ""]


def run_all(
    w: Workload,
    systems: Sequence[System],
    timeline_w: Workload,
    *,
    max_devices: int,
    jobs: int,
    curve_devices: Sequence[int],
    timeline_devices: dict[str, int],
    timeline_slo_ms: float,
    real: bool,
    progress: Callable[[str], None] | None = None,
) -> tuple[CompareResult, dict[str, Any], dict[str, Any]]:
    res = compare(w, systems, max_devices, jobs=jobs, curve_devices=curve_devices, progress=progress)
    by_sys = {n: g.outcomes for n, g in res.grids.items() if not g.autoscaled}
    curves = {str(d): trade_off_curves(by_sys, d) for d in curve_devices}
    tl = degradation(timeline_w, systems, timeline_devices, timeline_slo_ms, real=real, progress=progress)
    return res, curves, tl


def write_report(
    out: Path,
    results: Sequence[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]],
    command: str,
    notes: str = "",
) -> Path:
    """Write the PNGs and ``README.md`` for one or more profiles' (compare, curves, timeline) results."""
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# cascadeserve vs baselines: cost grid, trade-offs, degradation, ablations", ""]
    lines += ["Generated by `cascadeserve report`. Command:", "", "```bash", command, "```", ""]
    lines += ["Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()), ""]
    if notes:
        lines += [notes, ""]
    for cmp, curves, tl in results:
        name = cmp["profile"]
        (out / f"{name}-compare.json").write_text(json.dumps(cmp, indent=1, default=float) + "\n")
        (out / f"{name}-timeline.json").write_text(json.dumps(tl, default=float) + "\n")
        heat = plot_heatmaps(cmp, out / f"{name}-cost-grid.png")
        abl = plot_ablation(cmp, out / f"{name}-ablation.png")
        cur = plot_curves(curves, out / f"{name}-curves.png", f"{name}: latency-accuracy fronts at fixed devices")
        tlp = plot_timeline(tl, out / f"{name}-timeline-sim.png", f"{name}: degradation on a spiky trace (simulator)")
        lines += [f"## Profile `{name}`", ""]
        lines += [
            f"Trace: {cmp['trace']} ({cmp['requests']:,} requests, peak {cmp['max_qps']:g} QPS); devices of "
            f"{cmp['device_memory_mb']:g} MB, at most {cmp['max_devices']}. Compare wall time {cmp['wall_s']:.0f} s "
            f"(simulations per system: {cmp['simulations']}).",
            "",
            "### Minimum devices per cell (Fig. 7)",
            "",
            grid_table(cmp),
            "",
        ]
        ms, mh = cmp["median_savings"], cmp["min_high_accuracy_savings"]
        lines += [
            f"Median savings over cells a baseline reaches: **{'—' if ms is None else f'{ms:.2f}×'}** (target ≥ 3×); "
            f"minimum over high-accuracy cells: **{'—' if mh is None else f'{mh:.2f}×'}** (target ≥ 2×). Cells only "
            f"cascadeserve reaches: {cmp['cells_only_cascadeserve_reaches'] or 'none'}.",
            "",
            *claims_table(cmp),
            f"![cost grid]({heat.name})",
            "",
            "Best setting per cell and system:",
            "",
            "| cell | " + " | ".join(s for s in cmp["systems"] if s != OURS) + " |",
            "|" + "---|" * len(cmp["systems"]),
        ]
        for c in cmp["cells"]:
            cfgs = [
                json.dumps(c["best_config"][s]) if c["best_config"][s] else "—" for s in cmp["systems"] if s != OURS
            ]
            lines.append(f"| {c['p95_ms']:g} ms / {c['accuracy']:g} | " + " | ".join(f"`{x}`" for x in cfgs) + " |")
        lines += ["", "### Latency-accuracy at fixed devices (Fig. 5/6)", "", f"![curves]({cur.name})", ""]
        lines += [
            "### Degradation on a spiky trace (Fig. 8/9)",
            "",
            f"Trace: {tl['trace']}; SLO p95 ≤ {tl['slo_ms']:g} ms.",
            "",
        ]
        lines += [
            "| system | devices | setting | p95 ms | accuracy | real p95 ms | real accuracy |",
            "|---|---|---|---|---|---|---|",
        ]
        for s, e in tl["systems"].items():
            o = e["outcome"]
            rp = e.get("real_p95_ms")
            ra = e.get("real_accuracy")
            lines.append(
                f"| {s} | {e['devices']} | `{json.dumps(o['config'])}` | {o['p95_ms']:.1f} | {o['accuracy']:.4f} | "
                f"{'—' if rp is None else f'{rp:.1f}'} | {'—' if ra is None else f'{ra:.4f}'} |"
            )
        lines += ["", f"![timeline]({tlp.name})", ""]
        if any("real" in e for e in tl["systems"].values()):
            tlr = plot_timeline(
                tl, out / f"{name}-timeline-real.png", f"{name}: spiky trace on the runtime", key="real"
            )
            lines += [f"![timeline real]({tlr.name})", ""]
        lines += ["### Ablations (Fig. 12)", "", f"![ablation]({abl.name})", ""]
        abl_rows = [
            (c["devices"].get(OURS), c["devices"].get("no-switching"), c["devices"].get("no-cascade"))
            for c in cmp["cells"]
        ]
        for label, k in (("no-switching", 1), ("no-cascade", 2)):
            ratios = [r[k] / r[0] for r in abl_rows if r[0] is not None and r[k] is not None]
            if ratios:
                lines.append(
                    f"- {label}: median {statistics.median(ratios):.2f}× cascadeserve's devices over "
                    f"{len(ratios)} cells both reach."
                )
        lines.append("")
    lines.append(f"Baselines: {', '.join(BASELINES)}. Raw results: the `*-compare.json` and `*-timeline.json` files.")
    p = out / "README.md"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p
