"""The figures of one's own runs (matplotlib, Agg backend, PNG): a profile's accuracy/cost frontier, a gear plan, and
the timeline of a served run (offered QPS, gear, p95 latency, accuracy over time).

The demo draws its ``frontier.png``, ``gear_plan.png`` and ``timeline.png`` with these, and so do ``profile frontier
--plot``, ``plan --plot`` (and ``plan explain --plot``) and ``bench --plot``. Each ``*_figure`` function returns the
figure; each ``plot_*`` function draws it into a PNG file and returns the path. matplotlib is imported on the first
figure, not with this module.

A timeline takes any :class:`RequestLog`: per request in send order, its scheduled send time, latency, whether it was
answered, the gear that answered and whether the answer was right, and, where the log has it, whether it was shed
(``shed``: refused with 503, drawn as a series of its own beside the offered load). The demo's replay is one;
:func:`request_log` makes one from what ``bench`` measured (a :class:`~cascadeserve.eval.loadgen.LoadReport` and the
arrival times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cascadeserve.cascade import Cascade, enumerate_frontier
from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cascadeserve.eval.loadgen import LoadReport

__all__ = [
    "RequestLog",
    "frontier_figure",
    "plan_figure",
    "plot_frontier",
    "plot_plan",
    "plot_timeline",
    "request_log",
    "timeline_figure",
]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def frontier_figure(
    profile: Profile,
    plan: GearPlan | None = None,
    *,
    points: list[tuple[Cascade, float, float]] | None = None,
    batch_size: float = 16.0,
) -> Figure:
    """The profile's models (black), its cascade frontier (blue) and, given a plan, the plan's gears (red): accuracy
    against expected device ms per sample at ``batch_size``. ``points``: the frontier (default: 21 threshold levels
    per stage, every model order, as ``enumerate_frontier`` makes it at ``batch_size``)."""
    plt = _plt()
    pts = points
    if pts is None:
        pts = enumerate_frontier(profile, levels=np.round(np.linspace(0, 1, 21), 6), batch_size=batch_size)
    fig: Figure
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([w for _, _, w in pts], [a for _, a, _ in pts], "-o", ms=3, color="tab:blue", label="cascade frontier")
    for i, m in enumerate(profile.models):
        w = m.runtime.per_sample_ms(batch_size)
        ax.scatter([w], [profile.accuracies[i]], color="black", zorder=3)
        ax.annotate(m.name, (w, profile.accuracies[i]), textcoords="offset points", xytext=(5, -10), fontsize=8)
    groups: dict[str, list[int]] = {}
    gears = plan.gears if plan is not None else ()
    for gi, g in enumerate(gears):  # gears that share a cascade share a point: label them once
        groups.setdefault(str(g.cascade), []).append(gi)
    for gis in groups.values():
        ev = gears[gis[0]].cascade.evaluate(profile, batch_size)
        w, a = float(ev.work_ms[0]), float(ev.accuracy[0])
        ax.scatter([w], [a], marker="*", s=140, color="tab:red", zorder=4)
        label = f"gear {gis[0]}" if len(gis) == 1 else f"gears {gis[0]}-{gis[-1]}"
        ax.annotate(label, (w, a), xytext=(6, -12), textcoords="offset points", fontsize=8, color="tab:red")
    ax.set_xscale("log")
    ax.set_xlabel(f"expected device ms per sample (batch {batch_size:g}, log scale)")
    ax.set_ylabel("validation accuracy")
    red = ", plan gears (red)" if plan is not None else ""
    ax.set_title(f"{profile.name}: models (black), cascade frontier (blue){red}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot_frontier(
    profile: Profile,
    path: Path,
    plan: GearPlan | None = None,
    *,
    points: list[tuple[Cascade, float, float]] | None = None,
    batch_size: float = 16.0,
) -> Path:
    """:func:`frontier_figure`, drawn into the PNG file ``path``."""
    return _save(frontier_figure(profile, plan, points=points, batch_size=batch_size), path)


def plan_figure(plan: GearPlan) -> Figure:
    """Above: one bar per model and distinct gear over its QPS range, labelled with its threshold and batch trigger;
    below: each range's predicted accuracy and p95 latency."""
    plt = _plt()
    models: list[str] = []
    for g in plan.gears:
        for m in g.models:
            if m not in models:
                models.append(m)
    fig: Figure
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
    return fig


def plot_plan(plan: GearPlan, path: Path) -> Path:
    """:func:`plan_figure`, drawn into the PNG file ``path``."""
    return _save(plan_figure(plan), path)


class RequestLog(Protocol):
    """Per request, in send order, what a timeline needs."""

    @property
    def sent_s(self) -> np.ndarray: ...  # scheduled send time (s from the start)

    @property
    def latency_ms(self) -> np.ndarray: ...  # NaN where no answer came back

    @property
    def ok(self) -> np.ndarray: ...  # answered (HTTP 200)

    @property
    def gear(self) -> np.ndarray: ...  # the gear that answered, -1 where unknown

    @property
    def correct(self) -> np.ndarray | None: ...  # whether the answer was right; None: no labels to check against

    # optional, read where present: ``shed``, per request whether it was refused with 503


@dataclass(frozen=True, eq=False)
class _Log:
    sent_s: np.ndarray
    latency_ms: np.ndarray
    ok: np.ndarray
    gear: np.ndarray
    correct: np.ndarray | None
    shed: np.ndarray | None = None  # refused with 503


def request_log(arrivals: np.ndarray, report: LoadReport) -> RequestLog:
    """What ``bench`` measured, per request: ``arrivals`` are the scheduled send times ``run_load`` was given;
    ``correct`` is None where the report has no accuracy (no labels were sent)."""
    n = len(arrivals)
    ok = np.zeros(n, dtype=bool)
    ok[report.ok_index] = True
    latency = np.full(n, np.nan)
    latency[report.ok_index] = report.latency_ms
    gear = np.full(n, -1, dtype=np.int64)
    gear[report.ok_index] = report.gear
    correct = None
    if report.accuracy is not None:
        correct = np.zeros(n, dtype=bool)
        correct[report.ok_index] = report.correct
    shed = np.zeros(n, dtype=bool)
    shed[report.shed_index] = True
    return _Log(np.asarray(arrivals, dtype=np.float64), latency, ok, gear, correct, shed)


def _per_bin(r: RequestLog, seconds: float, width: float) -> dict[str, np.ndarray]:
    nb = max(math.ceil(seconds / width - 1e-9), 1)
    edges = np.arange(nb + 1) * width
    b = np.clip(np.digitize(r.sent_s, edges) - 1, 0, nb - 1)  # a send after ``seconds`` counts in the last bin
    out = {"t": edges[:nb], "qps": np.bincount(b, minlength=nb) / width}
    shed = getattr(r, "shed", None)  # optional in a RequestLog
    if shed is not None:
        out["shed"] = np.bincount(b[np.asarray(shed, dtype=bool)], minlength=nb) / width
    for key in ("p95", "acc", "gear"):
        out[key] = np.full(nb, np.nan)
    for i in range(nb):
        m = (b == i) & r.ok
        if m.any():
            out["p95"][i] = np.percentile(r.latency_ms[m], 95)
            out["gear"][i] = np.median(r.gear[m])
            if r.correct is not None:
                out["acc"][i] = r.correct[m].mean()
    return out


def timeline_figure(
    run: RequestLog,
    *,
    title: str,
    baseline: RequestLog | None = None,
    slo_ms: float | None = None,
    seconds: float | None = None,
    bin_s: float | None = None,
    label: str = "cascadeserve",
    baseline_label: str = "DynBa (top model, dynamic batching)",
) -> Figure:
    """Offered QPS (and, where the run shed requests, the shed ones per second in red), the median gear, p95 latency
    (per ``bin_s``, with ``slo_ms`` as a dashed line) and accuracy (per 5 ``bin_s``; left out when the run has no
    labels) over the run's first ``seconds`` (default: up to its last send). ``baseline``: a second run of the same
    load, drawn beside (the demo's DynBa). ``bin_s`` defaults to 1 s, or a tenth of a shorter run."""
    plt = _plt()
    if seconds is None:
        seconds = float(math.ceil(float(np.max(run.sent_s, initial=0.0)) + 1e-9)) or 1.0
    width = bin_s if bin_s is not None else (1.0 if seconds >= 10 else seconds / 10)
    with_acc = run.correct is not None
    fig: Figure
    fig, axes = plt.subplots(4 if with_acc else 3, 1, figsize=(9, 8 if with_acc else 6.5), sharex=True)
    fine, coarse = _per_bin(run, seconds, width), _per_bin(run, seconds, 5 * width)
    axes[0].plot(fine["t"], fine["qps"], color="black", label="offered")
    if "shed" in fine and fine["shed"].any():  # the requests refused with 503, as a series of their own
        shed = np.where(fine["shed"] > 0, fine["shed"], np.nan)
        axes[0].plot(fine["t"], shed, "x-", color="tab:red", ms=5, label="shed (503)")
        axes[0].legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("offered QPS")
    axes[1].step(fine["t"], fine["gear"], where="post", color="tab:purple")
    axes[1].set_ylabel("gear")
    axes[2].plot(fine["t"], fine["p95"], color="tab:blue", label=label)
    if with_acc:
        axes[3].plot(coarse["t"] + 2.5 * width, coarse["acc"], "o-", color="tab:blue", label=label)
    if baseline is not None:
        bfine, bcoarse = _per_bin(baseline, seconds, width), _per_bin(baseline, seconds, 5 * width)
        axes[2].plot(fine["t"], bfine["p95"], color="tab:red", alpha=0.8, label=baseline_label)
        if with_acc and baseline.correct is not None:
            axes[3].plot(coarse["t"] + 2.5 * width, bcoarse["acc"], "s-", color="tab:red", label=baseline_label)
    if slo_ms is not None:
        axes[2].axhline(slo_ms, color="gray", ls="--", label=f"SLO p95 {slo_ms:g} ms")
    if np.isfinite(fine["p95"]).any() and np.nanmin(fine["p95"]) > 0:
        axes[2].set_yscale("log")
    axes[2].set_ylabel(f"p95 latency ms ({width:g} s bins)")
    axes[2].legend(fontsize=7, loc="upper left")
    if with_acc:
        axes[3].set_ylabel(f"accuracy ({5 * width:g} s bins)")
        axes[3].legend(fontsize=7, loc="lower left")
    axes[-1].set_xlabel("seconds")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    fig.tight_layout()
    return fig


def plot_timeline(
    run: RequestLog,
    path: Path,
    *,
    title: str,
    baseline: RequestLog | None = None,
    slo_ms: float | None = None,
    seconds: float | None = None,
    bin_s: float | None = None,
) -> Path:
    """:func:`timeline_figure`, drawn into the PNG file ``path``."""
    fig = timeline_figure(run, title=title, baseline=baseline, slo_ms=slo_ms, seconds=seconds, bin_s=bin_s)
    return _save(fig, path)
