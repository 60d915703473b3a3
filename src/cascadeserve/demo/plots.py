"""The demo's three figures (matplotlib, Agg backend, PNG): the Pareto frontier, the gear plan, the timeline."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt
import numpy as np

from cascadeserve.cascade import enumerate_frontier
from cascadeserve.demo.load import Replay
from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile

__all__ = ["plot_frontier", "plot_plan", "plot_timeline"]


def plot_frontier(profile: Profile, plan: GearPlan, path: Path) -> Path:
    pts = enumerate_frontier(profile, levels=np.round(np.linspace(0, 1, 21), 6), batch_size=16)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([w for _, _, w in pts], [a for _, a, _ in pts], "-o", ms=3, color="tab:blue", label="cascade frontier")
    for i, m in enumerate(profile.models):
        w = m.runtime.per_sample_ms(16)
        ax.scatter([w], [profile.accuracies[i]], color="black", zorder=3)
        ax.annotate(m.name, (w, profile.accuracies[i]), textcoords="offset points", xytext=(5, -10), fontsize=8)
    groups: dict[str, list[int]] = {}
    for gi, g in enumerate(plan.gears):  # gears that share a cascade share a point: label them once
        groups.setdefault(str(g.cascade), []).append(gi)
    for gis in groups.values():
        ev = plan.gears[gis[0]].cascade.evaluate(profile, 16)
        w, a = float(ev.work_ms[0]), float(ev.accuracy[0])
        ax.scatter([w], [a], marker="*", s=140, color="tab:red", zorder=4)
        label = f"gear {gis[0]}" if len(gis) == 1 else f"gears {gis[0]}-{gis[-1]}"
        ax.annotate(label, (w, a), xytext=(6, -12), textcoords="offset points", fontsize=8, color="tab:red")
    ax.set_xscale("log")
    ax.set_xlabel("expected device ms per sample (batch 16, log scale)")
    ax.set_ylabel("validation accuracy")
    ax.set_title(f"{profile.name}: models (black), cascade frontier (blue), plan gears (red)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_plan(plan: GearPlan, path: Path) -> Path:
    models: list[str] = []
    for g in plan.gears:
        for m in g.models:
            if m not in models:
                models.append(m)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.9, max(len(models), 1)))
    # One column per distinct gear: neighbouring ranges with the same gear are one gear when served (no switch)
    for first, last in plan.gear_runs:
        g = plan.gears[first]
        lo, hi = g.qps_low, plan.gears[last].qps_high
        for stage, m in enumerate(g.models):
            j = models.index(m)
            ax.barh(j, hi - lo, left=lo, color=colors[j], edgecolor="white")
            mq = max((gr.min_queue for gr in g.replicas_of(m)), default=1)
            label = (f"t={g.thresholds[stage]:.2f}" if stage < len(g.thresholds) else "last") + f" q>={mq}"
            ax.text((lo + hi) / 2, j, label, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(models)), models)
    ax.set_ylabel("model (threshold t, batch trigger q)")
    n_runs = len(plan.gear_runs)
    ax.set_title(
        f"gear plan: {n_runs} distinct gear{'s' if n_runs != 1 else ''} over {len(plan.gears)} QPS ranges "
        f"({plan.slo or 'no SLO'})"
    )
    mids = [(g.qps_low + g.qps_high) / 2 for g in plan.gears]
    acc = [g.predicted_accuracy or np.nan for g in plan.gears]
    p95 = [g.predicted_p95_ms or np.nan for g in plan.gears]
    ax2.plot(mids, acc, "o-", color="tab:green", label="predicted accuracy")
    ax2.set_ylabel("accuracy", color="tab:green")
    ax3 = ax2.twinx()
    ax3.plot(mids, p95, "s--", color="tab:orange", label="predicted p95 ms")
    ax3.set_ylabel("p95 ms", color="tab:orange")
    ax2.set_xlabel("measured QPS")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _per_bin(r: Replay, seconds: int, width: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    edges = np.arange(0, seconds + width, width)
    b = np.clip(np.digitize(r.sent_s, edges) - 1, 0, len(edges) - 2)
    qps = np.bincount(b, minlength=len(edges) - 1) / width
    p95 = np.full(len(edges) - 1, np.nan)
    acc = np.full(len(edges) - 1, np.nan)
    gear = np.full(len(edges) - 1, np.nan)
    for k in range(len(edges) - 1):
        m = (b == k) & r.ok
        if m.any():
            p95[k] = np.percentile(r.latency_ms[m], 95)
            acc[k] = r.correct[m].mean()
            gear[k] = np.median(r.gear[m])
    return edges[:-1], qps, p95, np.vstack([acc, gear])


def plot_timeline(cascade: Replay, dynba: Replay | None, slo_ms: float, seconds: int, path: Path) -> Path:
    fig, axes = plt.subplots(4, 1, figsize=(9, 8), sharex=True)
    t, qps, p95, rest = _per_bin(cascade, seconds, 1.0)
    _, _, _, rest5 = _per_bin(cascade, seconds, 5.0)
    axes[0].plot(t, qps, color="black")
    axes[0].set_ylabel("offered QPS")
    axes[1].step(t, rest[1], where="post", color="tab:purple")
    axes[1].set_ylabel("gear")
    axes[2].plot(t, p95, color="tab:blue", label="cascadeserve")
    axes[3].plot(t[::5] + 2.5, rest5[0], "o-", color="tab:blue", label="cascadeserve")
    if dynba is not None:
        _, _, dp95, _ = _per_bin(dynba, seconds, 1.0)
        _, _, _, drest5 = _per_bin(dynba, seconds, 5.0)
        axes[2].plot(t, dp95, color="tab:red", alpha=0.8, label="DynBa (top model, dynamic batching)")
        axes[3].plot(t[::5] + 2.5, drest5[0], "s-", color="tab:red", label="DynBa")
    axes[2].axhline(slo_ms, color="gray", ls="--", label=f"SLO p95 {slo_ms:g} ms")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("p95 latency ms (1 s bins)")
    axes[2].legend(fontsize=7, loc="upper left")
    axes[3].set_ylabel("accuracy (5 s bins)")
    axes[3].legend(fontsize=7, loc="lower left")
    axes[3].set_xlabel("seconds")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].set_title("replayed Twitter excerpt against the real digits models on 2 local devices")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
