"""The figures (matplotlib, Agg backend): cost heatmaps (Fig. 7), trade-off curves (Fig. 5/6), degradation
timelines (Fig. 8/9) and ablation bars (Fig. 12). Each function takes the plain dicts the experiments return."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_ablation", "plot_curves", "plot_heatmaps", "plot_timeline", "plot_tuning"]

COLORS = {
    "cascadeserve": "tab:red",
    "dynba": "tab:blue",
    "ms+": "tab:green",
    "cocktail+": "tab:purple",
    "no-switching": "tab:orange",
    "no-cascade": "tab:brown",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_heatmaps(result: dict[str, Any], path: Path, systems: list[str] | None = None) -> Path:
    """One heatmap of minimum devices per system, and one of cascadeserve's savings over the best baseline."""
    plt = _plt()
    lats, accs = result["latency_slos_ms"], result["accuracy_targets"]
    names = systems or [s for s in result["systems"] if s in ("cascadeserve", "dynba", "ms+", "cocktail+")]
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(3.0 * (len(names) + 1), 3.2))
    cell = {(c["p95_ms"], c["accuracy"]): c for c in result["cells"]}
    vmax = result["max_devices"]
    for ax, name in zip(axes, [*names, "savings"], strict=True):
        grid = np.full((len(accs), len(lats)), np.nan)
        for i, a in enumerate(accs):
            for j, lat in enumerate(lats):
                c = cell[(lat, a)]
                v = c["savings"] if name == "savings" else c["devices"].get(name)
                grid[i, j] = np.nan if v is None else v
        cmap = "Greens" if name == "savings" else "viridis_r"
        kw = (
            {"vmin": 0.0, "vmax": max(3.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 3.0)}
            if name == "savings"
            else {"vmin": 1, "vmax": vmax}
        )
        ax.imshow(grid, cmap=cmap, origin="lower", aspect="auto", **kw)
        for i in range(len(accs)):
            for j in range(len(lats)):
                v = grid[i, j]
                txt = "—" if np.isnan(v) else (f"{v:.2f}×" if name == "savings" else f"{int(v)}")
                ax.text(
                    j, i, txt, ha="center", va="center", fontsize=9, color="black" if name == "savings" else "white"
                )
        ax.set_xticks(range(len(lats)), [f"{v:g}" for v in lats])
        ax.set_yticks(range(len(accs)), [f"{v:g}" for v in accs])
        ax.set_xlabel("p95 SLO (ms)")
        ax.set_title(name if name != "savings" else "savings vs best baseline")
    axes[0].set_ylabel("accuracy target")
    fig.suptitle(f"{result['profile']}: minimum devices (— = not within {vmax})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(curves: dict[str, dict[str, list[dict[str, float]]]], path: Path, title: str) -> Path:
    """Latency-accuracy Pareto fronts per system, one panel per device count."""
    plt = _plt()
    ds = sorted(curves, key=int)
    fig, axes = plt.subplots(1, len(ds), figsize=(4.5 * len(ds), 3.6), squeeze=False)
    for ax, d in zip(axes[0], ds, strict=True):
        for name, pts in curves[d].items():
            if pts:
                ax.step(
                    [p["p95_ms"] for p in pts],
                    [p["accuracy"] for p in pts],
                    where="post",
                    marker="o",
                    ms=3,
                    color=COLORS.get(name),
                    label=name,
                )
        ax.set_xscale("log")
        ax.set_xlabel("p95 latency (ms, log)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{d} device{'' if int(d) == 1 else 's'}")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timeline(tl: dict[str, Any], path: Path, title: str, key: str = "sim") -> Path:
    """QPS, sliding-window p95 (log) and accuracy over time, one line per system; the latency SLO shaded."""
    plt = _plt()
    fig, (a0, a1, a2) = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    a0.plot(tl["qps"]["t"], tl["qps"]["qps"], color="0.3")
    a0.set_ylabel("QPS")
    a1.axhspan(0, tl["slo_ms"], color="tab:green", alpha=0.12, label=f"SLO ≤ {tl['slo_ms']:g} ms")
    for name, e in tl["systems"].items():
        s = e.get(key)
        if not s:
            continue
        lab = f"{name} ({e['devices']} dev)"
        a1.plot(s["t"], s["p95_ms"], color=COLORS.get(name), label=lab)
        a2.plot(s["t"], s["accuracy"], color=COLORS.get(name), label=lab)
    a1.set_yscale("log")
    a1.set_ylabel(f"p95 (ms), {tl['window_s']:g} s window")
    a2.set_ylabel("accuracy")
    a2.set_xlabel("time (s)")
    a1.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ablation(result: dict[str, Any], path: Path) -> Path:
    """Minimum devices per cell for cascadeserve and its two ablations (— where not reachable)."""
    plt = _plt()
    names = [n for n in ("cascadeserve", "no-switching", "no-cascade") if n in result["systems"]]
    cells = result["cells"]
    x = np.arange(len(cells))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(cells)), 3.6))
    top = result["max_devices"] + 1
    for k, n in enumerate(names):
        vals = [c["devices"].get(n) for c in cells]
        h = [top if v is None else v for v in vals]
        bars = ax.bar(x + k * width, h, width, color=COLORS.get(n), label=n)
        for b, v in zip(bars, vals, strict=True):
            if v is None:
                b.set_hatch("//")
                b.set_alpha(0.35)
    ax.set_xticks(
        x + width * (len(names) - 1) / 2, [f"{c['p95_ms']:g}ms\n{c['accuracy']:g}" for c in cells], fontsize=7
    )
    ax.set_ylabel(f"min devices (hatched: > {result['max_devices']})")
    ax.set_title(f"{result['profile']}: ablations", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_tuning(doc: dict[str, Any], path: Path) -> Path:
    """Online threshold tuning under data drift (``benchmarks/bench_tuning_drift_runtime.py``): the tuned run's
    thresholds over time (per gear and stage), windowed agreement with the most accurate model against the tuner's
    target, and device work per request, for the fixed, tuned and most-accurate-alone systems."""
    plt = _plt()
    systems = doc["systems"]
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 7.5), sharex=True)
    tuned = systems.get("tuned")
    line0 = next(iter(systems.values()))
    end = max(s["t"][-1] + s["bucket_s"] for s in systems.values())
    if tuned is not None:
        # the gears that changed, or else the one that served most of the run
        shown = {c["gear"] for c in tuned["changes"]} or {max(set(tuned["gear"]), key=tuned["gear"].count)}
        for g, start in doc["initial"].items():
            gear = int(g)
            if gear not in shown:
                continue
            for stage, t0 in enumerate(start):
                ts, vs = [0.0], [t0]
                for c in tuned["changes"]:
                    if c["gear"] == gear:
                        ts.append(c["t"])
                        vs.append(c["new"][stage])
                ts.append(end)
                vs.append(vs[-1])
                axes[0].step(ts, vs, where="post", label=f"gear {gear} stage {stage}")
    axes[0].set_ylabel("threshold (tuned)")
    axes[0].legend(fontsize=7, ncol=2)
    colors = {"fixed": "tab:blue", "tuned": "tab:red", "best alone": "tab:green"}
    for name, s in systems.items():
        axes[1].plot(s["t"], s["agreement"], label=name, color=colors.get(name))
        axes[2].plot(s["t"], s.get("profiled_ms_per_request", s["work_ms_per_request"]), label=name,
                     color=colors.get(name))  # fmt: skip
    target = min(float(v) for v in doc["targets"].values())
    axes[1].axhline(target, color="black", linestyle="--", linewidth=0.8, label="tuner target")
    axes[1].set_ylabel("agreement with cnn-wide")
    axes[1].legend(fontsize=7)
    axes[2].set_ylabel("device ms / request" + (" (profiled)" if "profiled_ms_per_request" in line0 else ""))
    axes[2].set_xlabel("time (s); shifted images replace clean ones from 20 % to 60 % of the run")
    fig.suptitle(f"digits drift stream on emulated devices, {doc['qps']:g} QPS, audit {doc['audit']:g}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
