"""Option types shared by several commands: the trace spec, devices, the per-batch overhead, and value parsing with
clear errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from cascadeserve.api.settings import devices_from, slo_from
from cascadeserve.errors import CascadeServeError
from cascadeserve.traces import TRACE_SPEC_HELP, Trace, build_trace

__all__ = [
    "BatchOverheadOpt",
    "ProfileOverheadOpt",
    "TraceOptions",
    "devices_from",
    "parse_floats",
    "slo_from",
    "trace_options",
]

TraceOpt = Annotated[str, typer.Option("--trace", help=TRACE_SPEC_HELP.replace("\n", " "), show_default=False)]
TraceFormatOpt = Annotated[
    str | None,
    typer.Option("--trace-format", help="per-second | timestamps | azure-functions (default: guess)."),
]
MaxQpsOpt = Annotated[float | None, typer.Option("--max-qps", help="Scale the trace so its busiest second hits this.")]
WindowOpt = Annotated[str | None, typer.Option("--window", help="START:DURATION in seconds of trace time.")]
DropZeroOpt = Annotated[
    bool | None,
    typer.Option(
        "--drop-zero/--keep-zero",
        help="Drop seconds with no requests before scaling (default: keep; compare and report: the Twitter trace "
        "drops them, as the paper).",
        show_default=False,
    ),
]
ArrivalOpt = Annotated[str, typer.Option("--arrival", help="Arrival times within a bin: poisson | uniform.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed for arrival times.")]
BatchOverheadOpt = Annotated[
    float,
    typer.Option(
        "--batch-overhead-ms",
        min=0.0,
        help="Fixed cost per batch beyond the profiled runtime, e.g. from `eval fidelity --calibrate`; plans and "
        "simulations include it",
    ),
]
ProfileOverheadOpt = Annotated[
    float | None,
    typer.Option(
        "--batch-overhead-ms",
        min=0.0,
        help="Fixed cost per batch beyond the profiled runtime, e.g. from `eval fidelity --calibrate`; plans and "
        "simulations include it (default: the profile's recorded batch_overhead_ms, 0 when it has none)",
    ),
]


@dataclass(frozen=True)
class TraceOptions:
    spec: str
    fmt: str | None
    max_qps: float | None
    window: str | None
    drop_zero: bool
    arrival: str
    seed: int

    def build(self) -> Trace:
        return build_trace(
            self.spec,
            fmt=self.fmt,
            max_qps=self.max_qps,
            window=self.window,
            drop_zero=self.drop_zero,
            arrival=self.arrival,
            seed=self.seed,
        )


def trace_options(
    trace: str,
    trace_format: str | None,
    max_qps: float | None,
    window: str | None,
    drop_zero: bool,
    arrival: str,
    seed: int,
) -> TraceOptions:
    return TraceOptions(trace, trace_format, max_qps, window, drop_zero, arrival, seed)


def parse_floats(value: str, what: str) -> tuple[float, ...]:
    """``"0.7,0.5"`` -> ``(0.7, 0.5)``; a clear error naming the option otherwise."""
    if not value.strip():
        return ()
    out = []
    for part in value.split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise CascadeServeError(f"{what}: {part.strip()!r} is not a number") from None
    return tuple(out)


ReplanOpt = Annotated[
    str,
    typer.Option(
        help="Load drift: every second, compare the measured QPS distribution over the plan's ranges (the "
        "last --replan-window-s of 100 ms ticks) with the plan's (two-sample Kolmogorov-Smirnov distance: the largest "
        "gap between the two CDFs); over --replan-threshold, re-plan for the measured one in the background. auto: "
        "swap the new plan in when its predicted objective on the measured load is better (nothing dropped); "
        "notify: log and expose it without swapping; off: neither. serve also watches cost drift (--cost-tolerance): "
        "auto re-plans with the measured costs and swaps, notify logs the models."
    ),
]
# --tune's options, shared by `serve` and `simulate` (one declaration, one help text)
TuneTargetOpt = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=1.0,
        help="With --tune: accuracy to hold against the reference (default: each gear's score on the profile "
        "less --tune-budget).",
    ),
]
TuneBudgetOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="With --tune: accuracy budget.")]
AuditFractionOpt = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=1.0,
        help="With --tune: share of early exits audited (default: the plan's audit_fraction, else 0.02).",
    ),
]
TuneReferenceOpt = Annotated[
    str,
    typer.Option(
        help="With --tune: 'audit' (the last stage's prediction on audited and unsure requests) or 'label' (true "
        "labels: the profile's in simulate; in serve, from POST /v2/models/{m}/feedback, and requests without "
        "feedback enter no window)."
    ),
]
ReplanThresholdOpt = Annotated[
    float, typer.Option(help="KS distance in (0, 1] between measured and planned range weights that triggers.")
]
ReplanWindowOpt = Annotated[float, typer.Option(help="Seconds of per-tick QPS the distribution is measured over.")]
ReplanMinOpt = Annotated[
    float, typer.Option(help="Measure this long before the first drift decision or QPS-scale estimate.")
]
ReplanCooldownOpt = Annotated[float, typer.Option(help="After a drift decision, wait this long for the next.")]
QpsScalingOpt = Annotated[
    str,
    typer.Option(
        help="Appendix C.2: multiply measured QPS, before the gear lookup, by a factor re-estimated every second "
        "(least squares between the measured and the planned QPS quantiles, after --replan-min-s). on; off; auto: "
        "for accuracy-SLO plans only (the paper's rule)."
    ),
]
