"""``cascadeserve eval``: experiments that check cascadeserve's own machinery against ground truth.

* ``eval planner``: the planner against exhaustive search and random sampling on the paper's constrained space
  (§6.5, Fig. 10): hypervolume fraction and times (:func:`cascadeserve.eval.quality.compare_planner`).
* ``eval planner-time``: planner wall time and submodule calls as ``n_ranges`` grows (Fig. 11).

Each command is a thin wrapper: the experiment is a function in the library (so other ``eval`` commands and the
benchmarks can reuse it), the command loads inputs, prints a table or ``--json``, and draws ``--plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cascadeserve.cli.common import devices_from, slo_from
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, err_console, print_json
from cascadeserve.eval.quality import compare_planner, planner_time_sweep
from cascadeserve.profile import load_profile
from cascadeserve.traces import build_trace

__all__ = ["eval_app", "plot_planner_quality", "plot_planner_time"]

eval_app = typer.Typer(help="Evaluate cascadeserve's planner and simulator against ground truth.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

ProfileOpt = Annotated[Path, typer.Option(help="Profile directory.")]
DevicesOpt = Annotated[int, typer.Option(help="Number of devices.")]
MemoryOpt = Annotated[float, typer.Option(help="Memory per device in MB.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
PlotOpt = Annotated[Path | None, typer.Option(help="Write a PNG figure here.")]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_planner_quality(result: dict[str, Any], path: Path) -> None:
    """Fig. 10: each method's latency-accuracy front."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {"exhaustive": ("0.5", "o", "-"), "random": ("tab:blue", "s", "--"), "planner": ("tab:red", "^", "-")}
    for name, (color, marker, line) in styles.items():
        pts = result["frontiers"][name]
        if pts:
            ax.step(
                [p["p95_ms"] for p in pts],
                [p["accuracy"] for p in pts],
                where="post",
                color=color,
                linestyle=line,
                marker=marker,
                label=f"{name} (HV {result['hypervolume'][name]:.3g})",
            )
    ax.set_xlabel("p95 latency (ms)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{result['profile']}: planner {result['hypervolume_fraction']:.3f} of exhaustive hypervolume")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_planner_time(result: dict[str, Any], path: Path) -> None:
    """Fig. 11: submodule calls and wall time against the number of QPS ranges."""
    plt = _plt()
    runs = result["runs"]
    ks = [r["n_ranges"] for r in runs]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for name in runs[0]["submodule_calls"]:
        a1.plot(ks, [r["submodule_calls"][name] for r in runs], marker="o", label=name)
    a1.set_xlabel("QPS ranges")
    a1.set_ylabel("submodule calls")
    a1.legend(fontsize=7)
    a2.plot(ks, [r["planner_s"] for r in runs], marker="o", color="k")
    a2.set_xlabel("QPS ranges")
    a2.set_ylabel("planner wall time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@eval_app.command("planner")
def planner_quality(
    profile: ProfileOpt,
    max_qps: Annotated[
        float | None,
        typer.Option(
            help="QPS of the trace (Poisson) and of the plan (default: what the devices serve with the most accurate "
            "model alone in batches within 25 ms, the rule compare and report use; stated in the output)."
        ),
    ] = None,
    devices: DevicesOpt = 1,
    device_memory_mb: Annotated[
        float | None, typer.Option(help="Memory per device in MB (default: room for every model).")
    ] = None,
    levels: Annotated[int, typer.Option(help="Threshold levels per stage, for all three methods.", min=1)] = 10,
    slo_count: Annotated[int, typer.Option(help="How many latency SLOs the planner is run for.", min=1)] = 20,
    trace: Annotated[str | None, typer.Option(help="Short trace spec instead of Poisson at --max-qps.")] = None,
    duration_s: Annotated[
        float | None, typer.Option(help="Length of the default Poisson trace (s; default: SP4's check length).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    workload: WorkloadOpt = None,
) -> None:
    """Planner vs exhaustive vs random (2× the planner's time) on the constrained space (paper §6.5, Fig. 10), under
    one set of rules: the same batch caps, the same keep-up test (a point that builds a backlog is infeasible)."""
    prof = load_profile(profile)
    mem = device_memory_mb if device_memory_mb is not None else sum(m.memory_mb for m in prof.models) + 1.0
    tr = build_trace(trace, seed=seed) if trace is not None else None
    with (err_console if as_json else console).status("searching exhaustively, planning, sampling at random"):
        result = compare_planner(
            prof,
            devices_from(devices, mem),
            max_qps,
            levels=levels,
            n_slos=slo_count,
            trace=tr,
            duration_s=duration_s,
            seed=seed,
        )
    if plot is not None:
        plot_planner_quality(result, plot)
        result["plot"] = str(plot)
    if as_json:
        print_json(result)
        return
    table = Table(
        title=f"planner quality on {result['profile']} ({result['space_size']:,} cascades, {result['trace']})"
    )
    table.add_column("method")
    table.add_column("front points", justify="right")
    table.add_column("hypervolume", justify="right")
    table.add_column("fraction of exhaustive", justify="right")
    table.add_column("seconds", justify="right")
    hv_ex = result["hypervolume"]["exhaustive"] or 1.0
    for name, secs in (("planner", "planner_s"), ("exhaustive", "exhaustive_s"), ("random", "random_s")):
        hv = result["hypervolume"][name]
        table.add_row(
            name, str(len(result["frontiers"][name])), f"{hv:.4g}", f"{hv / hv_ex:.3f}", f"{result[secs]:.3f}"
        )
    console.print(table)
    console.print(f"one planner run: median {result['planner_run_s'] * 1000:.1f} ms", highlight=False)
    console.print(
        f"load {result['load']}; {result['infeasible_points']} of {result['space_size']} cascades build a backlog "
        f"(infeasible for every method); batch caps {result['batch_caps']}",
        highlight=False,
    )


@eval_app.command("planner-time")
def planner_time(
    profile: ProfileOpt,
    max_qps: Annotated[float, typer.Option(help="The highest QPS to plan for.")],
    devices: DevicesOpt = 4,
    device_memory_mb: MemoryOpt = 16000.0,
    slo_p95_ms: Annotated[float | None, typer.Option(help="Latency SLO (ms).")] = None,
    slo_accuracy: Annotated[float | None, typer.Option(help="Accuracy SLO.")] = None,
    ranges: Annotated[str, typer.Option(help="Comma-separated n_ranges values to sweep.")] = "1,2,5,10,20,40",
    repeats: Annotated[int, typer.Option(help="Runs per value (median time).", min=1)] = 1,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    workload: WorkloadOpt = None,
) -> None:
    """Planner wall time and submodule calls as the number of QPS ranges grows (paper Fig. 11)."""
    prof = load_profile(profile)
    try:
        ks = [int(x) for x in ranges.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter("--ranges must be comma-separated whole numbers") from None
    slo = slo_from(slo_p95_ms, slo_accuracy)
    with (err_console if as_json else console).status("timing the planner"):
        result = planner_time_sweep(
            prof, devices_from(devices, device_memory_mb), slo, max_qps, ks, seed=seed, repeats=repeats
        )
    if plot is not None:
        plot_planner_time(result, plot)
        result["plot"] = str(plot)
    if as_json:
        print_json(result)
        return
    table = Table(title=f"planner time on {result['profile']} ({result['slo']}, up to {max_qps:,.0f} QPS)")
    for col in ("ranges", "feasible", "seconds", "calls", "simulations", "converged"):
        table.add_column(col, justify="right")
    for r in result["runs"]:
        table.add_row(
            str(r["n_ranges"]),
            "yes" if r["feasible"] else "no",
            f"{r['planner_s']:.3f}",
            str(r["iterations"]),
            str(r["simulations"]),
            "yes" if r["converged"] else "no",
        )
    console.print(table)
