"""Request-arrival traces: load public traces, generate synthetic ones, window, scale and replay them.

A :class:`Trace` is a sorted array of arrival times (seconds) in a window of known length. Build one from a
single spec string with :func:`build_trace` (a file path or ``synthetic:<kind>:k=v,...``; see
:data:`TRACE_SPEC_HELP`), or use the parts: the loaders for the per-second, timestamp and Azure Functions
formats, :func:`scale_counts` / :func:`drop_zero_bins` / :func:`arrivals_from_counts` on count series, and
the synthetic generators (:func:`constant`, :func:`poisson`, :func:`step`, :func:`spike`, :func:`zipf`).

The package is pure (numpy only): no I/O besides reading the trace files, no asyncio or web imports.
"""

from __future__ import annotations

from cascadeserve.traces.counts import (
    ARRIVAL_KINDS,
    ArrivalKind,
    arrivals_from_counts,
    as_counts,
    drop_zero_bins,
    scale_counts,
)
from cascadeserve.traces.loaders import load_azure_functions_minutes, load_per_second_counts, load_timestamps
from cascadeserve.traces.spec import (
    FORMATS,
    SYNTHETIC_KINDS,
    TRACE_SPEC_HELP,
    build_trace,
    guess_format,
    parse_window,
    synthetic_trace,
)
from cascadeserve.traces.synthetic import constant, piecewise, poisson, spike, step, zipf
from cascadeserve.traces.trace import Trace

__all__ = [
    "ARRIVAL_KINDS",
    "FORMATS",
    "SYNTHETIC_KINDS",
    "TRACE_SPEC_HELP",
    "ArrivalKind",
    "Trace",
    "arrivals_from_counts",
    "as_counts",
    "build_trace",
    "constant",
    "drop_zero_bins",
    "guess_format",
    "load_azure_functions_minutes",
    "load_per_second_counts",
    "load_timestamps",
    "parse_window",
    "piecewise",
    "poisson",
    "scale_counts",
    "spike",
    "step",
    "synthetic_trace",
    "zipf",
]
