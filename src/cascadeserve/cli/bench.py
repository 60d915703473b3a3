"""``cascadeserve bench``: open-loop load against a V2 server, with one JSON summary at the end (the requests shed with
503 as a count and a share of those sent) and, with ``--plot``, the run's timeline
(:mod:`cascadeserve.eval.run_figures`, imported only then: it brings matplotlib), the shed requests as a series of
their own and the SLO as a line (``--slo-p95-ms``, else the server's own, read from its ``/metrics``)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cascadeserve.cli.common import (
    ArrivalOpt,
    DropZeroOpt,
    MaxQpsOpt,
    SeedOpt,
    TraceFormatOpt,
    TraceOpt,
    WindowOpt,
    trace_options,
)
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, err_console, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.eval.loadgen import run_load
from cascadeserve.profile import load_profile

__all__ = ["bench", "served_model", "server_slo_ms"]


@app.command("bench")
def bench(
    trace: TraceOpt,
    url: Annotated[str, typer.Option(help="Server base URL (serve's default address).")] = "http://127.0.0.1:8000",
    name: Annotated[
        str | None, typer.Option(help="V2 model name, as serve --name (default: the server's one model).")
    ] = None,
    duration_s: Annotated[float | None, typer.Option(help="Send only the first S seconds.")] = None,
    profile: Annotated[
        Path | None, typer.Option(help="Profile directory: send its validation sample ids, check labels.")
    ] = None,
    validation: Annotated[
        str | None,
        typer.Option(
            "--validation",
            help="Send real inputs: labelled data (digits | tweets[:DIR] | FILE.npz | FILE.csv), request i row "
            "i mod n, answers checked against its labels (a server of real models; --profile is for emulated ones).",
        ),
    ] = None,
    timeout_ms: Annotated[
        float | None, typer.Option(help="Per-request deadline sent as parameters.timeout_ms.")
    ] = None,
    connections: Annotated[int, typer.Option(help="Most requests open at once (more wait for a connection).")] = 256,
    client_timeout_s: Annotated[
        float, typer.Option(help="The client gives up on a request after this long (counted as timed_out).")
    ] = 60.0,
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also draw the run's timeline into this PNG file: offered QPS and the requests shed, the gear that "
            "answered, p95 latency against the SLO and (with labels) accuracy over time, as measured (the demo's "
            "timeline.png).",
        ),
    ] = None,
    slo_p95_ms: Annotated[
        float | None,
        typer.Option(help="The SLO line --plot draws (default: the server's, read from its /metrics when it says)."),
    ] = None,
    workload: WorkloadOpt = None,
) -> None:
    """Replay a trace against a server (open loop) and report latency, accuracy, throughput and send lag; shed
    (503), too large (413), deadline (504), timed-out and refused requests are counted apart. Against an emulated
    server give --profile: it sends the profile's validation samples in turn, as the simulator does."""
    if connections < 1:
        raise CascadeServeError(f"--connections: {connections} must be at least 1")
    if not client_timeout_s > 0:
        raise CascadeServeError(f"--client-timeout-s: {client_timeout_s} must be positive")
    tr = trace_options(trace, trace_format, max_qps, window, bool(drop_zero), arrival, seed).build()
    model = name if name is not None else served_model(url)
    arrivals = tr.arrivals if duration_s is None else tr.arrivals[tr.arrivals < duration_s]
    if len(arrivals) == 0:
        raise CascadeServeError("the trace has no requests in the chosen duration")
    if profile is not None and validation is not None:
        raise CascadeServeError("--profile and --validation: give one (sample ids for an emulated server, or inputs)")
    ids = labels = rows = None
    if profile is not None:
        prof = load_profile(profile)
        ids, labels = prof.sample_ids, prof.labels
    if validation is not None:
        from cascadeserve.models import load_validation  # the models package only when real inputs are sent

        data = load_validation(validation)
        rows = np.asarray(data.inputs, dtype=object if isinstance(data.inputs, list) else None)
        labels = data.labels
    with Progress(
        TextColumn("bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("answered {task.fields[done]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=as_json,
    ) as bar:
        task = bar.add_task("send", total=len(arrivals), done=0)

        def progress(sent: int, done: int) -> None:
            bar.update(task, completed=sent, done=done)

        try:
            report = asyncio.run(
                run_load(
                    url,
                    model,
                    arrivals,
                    sample_ids=ids,
                    labels=labels,
                    timeout_ms=timeout_ms,
                    progress=progress,
                    connections=connections,
                    request_timeout_s=client_timeout_s,
                    rows=rows,
                )
            )
        except (OSError, RuntimeError, ValueError) as e:
            raise CascadeServeError(f"bench against {url}: {e}") from None
    out: dict[str, Any] = {}
    for k, v in {"trace": tr.source, **report.to_dict()}.items():
        out[k] = v
        if k == "shed":  # the share of the requests sent that were refused with 503, beside the count
            out["shed_pct"] = round(100.0 * report.shed / report.sent, 2) if report.sent else 0.0
    if plot is not None:
        from cascadeserve.eval.run_figures import plot_timeline, request_log  # matplotlib only for a figure

        title = f"bench against {model} at {url}\n{tr.source}"
        seconds = tr.duration_s if duration_s is None else min(duration_s, tr.duration_s)
        slo = slo_p95_ms if slo_p95_ms is not None else server_slo_ms(url, model)
        plot_timeline(request_log(arrivals, report), plot, title=title, seconds=seconds, slo_ms=slo)
        out["plot"] = str(plot)
    if as_json:
        print_json(out)
        return
    for k, v in out.items():
        if k == "shed_pct":
            continue
        if k == "shed":
            v = f"{v} ({out['shed_pct']:g} % of {report.sent} sent)"
        console.print(f"{k:>18}: {v}", highlight=False, soft_wrap=True)


def served_model(url: str) -> str:
    """The name of the one model the server at ``url`` serves (its V2 repository index), for ``bench`` without
    ``--name``; an error naming the choices where it serves several, or saying why it could not ask."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{url}/v2/repository/index", data=b'{"ready": true}', method="POST")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30.0) as r:
            index = json.loads(r.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise CascadeServeError(f"--name: not given, and {url} could not say what it serves ({e})") from None
    names = sorted({str(m["name"]) for m in index if isinstance(m, dict) and m.get("state") == "READY"})
    if len(names) != 1:
        listed = ", ".join(names) or "none ready"
        raise CascadeServeError(f"--name: not given, and {url} serves {len(names)} models ({listed}): name one")
    return names[0]


def server_slo_ms(url: str, model: str) -> float | None:
    """The p95 SLO the server holds ``model`` to, in ms (its ``cascadeserve_slo_p95_seconds`` gauge, the sample of
    that cascade where it serves several), or ``None`` where it does not say or cannot be read."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5.0) as r:  # the server the run was against
            text = r.read().decode("utf-8", errors="replace")
        for family in text_string_to_metric_families(text):
            if family.name == "cascadeserve_slo_p95_seconds":
                for sample in family.samples:
                    if sample.labels.get("cascade", model) == model and math.isfinite(sample.value):
                        return float(sample.value) * 1000.0
    except (OSError, ValueError):
        return None
    return None
