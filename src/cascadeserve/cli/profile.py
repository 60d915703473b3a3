"""``cascadeserve profile``: inspect a profile directory (per-model facts, the cascade frontier), or measure one.

``profile measure`` runs real models (``cascadeserve.models``); its imports are deferred so that ``show`` and
``frontier`` stay fast and need no framework. After timing the models it measures the runtime's own per-batch
overhead on this machine (:mod:`cascadeserve.eval.overhead`, about a second) and records it in ``profile.yaml``
(``batch_overhead_ms``), so plans and simulations of the profile include it by default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from cascadeserve.api.settings import batch_sizes as batch_sizes_of
from cascadeserve.api.steps import MeasureProgress, measure_family
from cascadeserve.cascade import enumerate_frontier
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, err_console, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.profile import load_profile
from cascadeserve.profile.noise import CI_TARGET

__all__ = ["frontier", "measure_cmd", "measure_progress", "profile_app", "show", "signals"]

profile_app = typer.Typer(help="Inspect or measure model-family profiles.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")

ProfileDir = Annotated[
    Path, typer.Option("--profile", help="Profile directory (profile.yaml, labels.csv, predictions/).")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@profile_app.command("show")
def show(profile: ProfileDir, as_json: AsJson = False, workload: WorkloadOpt = None) -> None:
    """Per model: accuracy, runtime at batch 1 and 64, memory."""
    prof = load_profile(profile)
    rows = prof.summary()
    if as_json:
        print_json({"name": prof.name, "device": prof.device, "samples": prof.n_samples, "models": rows})
        return
    table = Table(title=f"{prof.name}: {prof.n_samples} validation samples ({prof.device or 'device n/a'})")
    for col in ("model", "accuracy", "ms @ b=1", "ms @ b=64", "memory MB"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(
            str(r["model"]),
            f"{r['accuracy']:.4f}",
            f"{r['runtime_ms_b1']:.3f}",
            f"{r['runtime_ms_b64']:.3f}",
            f"{r['memory_mb']:.1f}",
        )
    console.print(table)


@profile_app.command("frontier")
def frontier(
    profile: ProfileDir,
    as_json: AsJson = False,
    levels: Annotated[int, typer.Option(help="Threshold levels in [0, 1] per stage.", min=2, max=101)] = 11,
    batch_size: Annotated[float, typer.Option(help="Batch size at which work is measured.", min=1)] = 1.0,
    max_models: Annotated[int | None, typer.Option(help="Longest cascade to consider.", min=1)] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Also draw the frontier and each model into this PNG file (the demo's frontier.png)."
        ),
    ] = None,
    workload: WorkloadOpt = None,
) -> None:
    """The Pareto frontier of cascades: accuracy against expected device-ms per sample."""
    prof = load_profile(profile)
    pts = enumerate_frontier(
        prof, levels=np.round(np.linspace(0, 1, levels), 6), batch_size=batch_size, max_models=max_models
    )
    if plot is not None:
        from cascadeserve.eval.run_figures import plot_frontier  # matplotlib only when a figure is asked for

        plot_frontier(prof, plot, points=pts, batch_size=batch_size)
    if as_json:
        print_json(
            {
                "name": prof.name,
                "batch_size": batch_size,
                "frontier": [
                    {"models": list(c.models), "thresholds": list(c.thresholds), "accuracy": a, "work_ms": w}
                    for c, a, w in pts
                ],
                **({"plot": str(plot)} if plot is not None else {}),
            }
        )
        return
    table = Table(title=f"{prof.name}: cascade frontier ({len(pts)} points, work at batch {batch_size:g})")
    for col in ("cascade", "accuracy", "work ms/sample"):
        table.add_column(col, justify="left" if col == "cascade" else "right")
    for c, a, w in pts:
        table.add_row(str(c), f"{a:.4f}", f"{w:.4f}")
    console.print(table)
    if plot is not None:
        console.print(f"wrote {plot}", highlight=False, soft_wrap=True)


@profile_app.command("signals")
def signals(profile: ProfileDir, as_json: AsJson = False, workload: WorkloadOpt = None) -> None:
    """Per LLM stage: each certainty signal's AUROC for "the stage is right" (from the profile's llm/ files)."""
    from cascadeserve.profile.llm_side import read_costs, signal_report

    prof = load_profile(profile)
    rows = signal_report(profile, [m.name for m in prof.models])
    if not rows:
        raise CascadeServeError(f"{profile}: no LLM certainty signals (llm/signals/<model>.csv); measure LLM stages")
    costs = read_costs(profile)
    if as_json:
        print_json(
            {
                "name": prof.name,
                "signals": [{**r, "auroc": None if np.isnan(r["auroc"]) else r["auroc"]} for r in rows],
                "costs": {m: asdict(c) for m, c in costs.items()},
            }
        )
        return
    table = Table(title=f"{prof.name}: certainty signals (AUROC for 'the stage is right')")
    for col in ("model", "signal", "accuracy", "samples", "AUROC"):
        table.add_column(col, justify="left" if col in ("model", "signal") else "right")
    for r in rows:
        table.add_row(r["model"], r["signal"], f"{r['accuracy']:.4f}", str(r["samples"]), f"{r['auroc']:.4f}")
    console.print(table)
    for m, c in costs.items():
        b1 = min(c.prefill_ms_per_token)
        fixed = f"{c.fixed_ms[b1]:.3g} ms fixed, " if b1 in c.fixed_ms else ""
        console.print(
            f"{m}: {fixed}prefill {c.prefill_ms_per_token[b1]:.3g} ms/token and decode {c.decode_ms_per_step[b1]:.3g} "
            f"ms/step at batch {b1}; weights {c.weights_mb:.0f} MB, KV cache {c.kv_cache_mb_per_token * 1000:.1f} "
            "kB/token",
            highlight=False,
        )


@contextlib.contextmanager
def measure_progress(sizes: tuple[int, ...], *, transient: bool = False) -> Iterator[MeasureProgress]:
    """A bar per model on stderr while a family is measured (``profile measure``, ``up``): the callback to pass."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[step]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=transient,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(model: str, step: str, done: int, total: int) -> None:
            if model not in tasks:
                tasks[model] = bar.add_task(model, total=total, step="")
            label = {"skip": "already measured", "done": "done", "load": "loading", "predict": "predicting"}.get(step)
            if label is None:  # not built eagerly: with one batch size, "load" (done 0) has no batch to name
                label = f"timing batch {sizes[min(max(done - 2, 0), len(sizes) - 1)]}"
            bar.update(tasks[model], completed=done, total=total, step=label)

        yield progress


@profile_app.command("measure")
def measure_cmd(
    models: Annotated[Path, typer.Option("--models", help="Models config YAML (name, adapter, ref, ...).")],
    validation: Annotated[
        str,
        typer.Option("--validation", help="Labelled data: digits | tweets[:DIR] | FILE.npz | FILE.csv | FILE.jsonl."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Profile directory to write (resumable per model).")],
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", help="Batch sizes to time; '...' doubles.")
    ] = "1,2,4,...,256",
    repeats: Annotated[
        int,
        typer.Option(
            help="Timed runs per batch size at least, each on other random inputs (their mean kept); more until the "
            "mean is known to within --ci-target.",
            min=1,
        ),
    ] = 15,
    max_repeats: Annotated[
        int | None, typer.Option(help="Timed runs per batch size at most (default: 4 x --repeats).", min=1)
    ] = None,
    ci_target: Annotated[
        float,
        typer.Option(
            help="A batch size's runtime is stable once its 95 % confidence interval is within this share of it "
            "(0.05: ±5 %); one that is not after --max-repeats runs is noted in the profile.",
            min=0.001,
            max=1.0,
        ),
    ] = CI_TARGET,
    warmup: Annotated[int, typer.Option(help="Untimed runs per batch size first.", min=0)] = 2,
    threads: Annotated[int | None, typer.Option(help="Intra-op threads per model (default: config, else 1).")] = None,
    pause_ms: Annotated[
        float,
        typer.Option(
            help="Idle time before each timed run: 0 times batches back to back (a busy server); e.g. 50 times them "
            "as a lightly loaded server runs them, after the device went idle (slower on a GPU).",
            min=0.0,
            max=10_000.0,
        ),
    ] = 0.0,
    profile_name: Annotated[
        str | None, typer.Option(help="The profile's name (default: the --out folder's name).")
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Measure every model again (no resume).")] = False,
    limit: Annotated[int | None, typer.Option(help="Use only the first N validation rows.", min=1)] = None,
    as_json: AsJson = False,
    workload: WorkloadOpt = None,
) -> None:
    """Measure a model family: runtime per batch size, memory, predictions and certainty; write a profile. Warns
    (on stderr, and in the profile's notes) about runtimes that did not settle, curves that fall, near-zero
    runtimes and a busy host."""
    sizes = batch_sizes_of(batch_sizes)
    if max_repeats is not None and max_repeats < repeats:
        raise CascadeServeError(f"--max-repeats {max_repeats} is below --repeats {repeats}")

    def say(line: str) -> None:
        err_console.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)

    with measure_progress(sizes, transient=as_json) as progress:
        prof, measured = measure_family(
            models, validation, out, batch_sizes=sizes, repeats=repeats, warmup=warmup, threads=threads,
            pause_ms=pause_ms, name=profile_name, resume=not fresh, limit=limit, progress=progress,
            max_repeats=max_repeats, ci_target=ci_target, say=say,
        )  # fmt: skip
    if as_json:
        summary = {"out": str(out), "name": prof.name, "device": prof.device, "models": prof.summary()}
        print_json({**summary, "notes": list(prof.notes)})
        return
    console.print(
        f"wrote {out} ({measured} models, {prof.n_samples} samples; {prof.device})", highlight=False, soft_wrap=True
    )
    show(out)
