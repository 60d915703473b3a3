"""One string for every trace: a file path or ``synthetic:<kind>:k=v,...``, turned into a :class:`Trace`.

:func:`build_trace` is what the CLI, the simulator and the benchmarks call. The pipeline, in order:

1. **Load.** A file is read as per-second counts, request timestamps or Azure Functions per-minute counts
   (``fmt``, or guessed from the first line: a ``TIMESTAMP`` column means timestamps, ``HashFunction`` or
   ``minute_N`` columns mean Azure Functions, anything else per-second counts). A synthetic spec is generated
   (:mod:`cascadeserve.traces.synthetic`).
2. **Window** ``START:DURATION`` seconds of trace time. Count traces are cut on their bins; a per-minute bin
   stands for 60 s at ``count / 60`` requests per second, and a bin the window cuts keeps its share of the
   count (rounded). Timestamp and synthetic traces are cut exactly.
3. **Drop zero bins** (``drop_zero``): empty bins (seconds for per-second counts and for timestamp traces,
   minutes for Azure Functions) are removed and the rest closed up, as the CascadeServe paper does.
4. **Scale** (``max_qps``): every bin is multiplied by one factor so that the busiest bin runs at ``max_qps``
   requests per second, then rounded (:func:`~cascadeserve.traces.counts.scale_counts`). For timestamp and
   synthetic traces this needs counts, so the trace is binned into seconds, scaled and its arrivals
   regenerated; without ``max_qps`` their exact arrival times are kept (zero seconds dropped, if asked, by
   closing the gaps).
5. **Arrivals.** Counts become arrival times with ``arrival`` (``poisson``: sorted random positions in each
   bin; ``uniform``: evenly spaced) and ``seed``.

A timestamp trace with token columns (the Azure LLM inference trace's ``ContextTokens`` and ``GeneratedTokens``)
keeps each request's tokens (:attr:`Trace.tokens`) through the window and the dropped seconds; scaled, its
arrivals are new, and each takes the tokens of a request of the window, drawn with the seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from cascadeserve.errors import TraceError
from cascadeserve.traces import synthetic
from cascadeserve.traces.counts import ArrivalKind, arrivals_in_bins, check_arrival, check_positive
from cascadeserve.traces.loaders import (
    load_azure_functions_minutes,
    load_per_second_counts,
    load_timestamps_with_tokens,
    read_header,
)
from cascadeserve.traces.trace import Trace

__all__ = [
    "FORMATS",
    "SYNTHETIC_KINDS",
    "TRACE_SPEC_HELP",
    "build_trace",
    "guess_format",
    "parse_window",
    "synthetic_trace",
]

FORMATS: Final[tuple[str, ...]] = ("per-second", "timestamps", "azure-functions")
SYNTHETIC_PREFIX: Final = "synthetic:"

TRACE_SPEC_HELP: Final = """\
A trace is a file or a synthetic pattern:
  PATH  per-second counts (whitespace-separated integers), a CSV with a TIMESTAMP column (one row per
        request), or the Azure Functions CSV (minute_1..minute_N counts, summed over functions); the format
        is guessed from the first line unless given: per-second, timestamps, azure-functions.
  synthetic:constant:qps=Q,duration=S        synthetic:poisson:qps=Q,duration=S
  synthetic:step:low=Q,high=Q,at=S,duration=S
  synthetic:spike:base=Q,peak=Q,at=S,width=S,duration=S
  synthetic:zipf:max_qps=Q,duration=S[,exponent=1.1,levels=10,seconds_per_level=1]
Then, in order: window START:DURATION (seconds of trace time), drop zero bins, scale so the busiest second
runs at max QPS, place arrivals (poisson or uniform) with a seed."""

# Float window edges within this fraction of a bin of a bin boundary count as on it.
_EPS = 1e-9

_Builder = Callable[[dict[str, float], ArrivalKind, int], Trace]


@dataclass(frozen=True)
class _Kind:
    required: tuple[str, ...]
    build: _Builder
    optional: dict[str, float] = field(default_factory=dict)
    integers: frozenset[str] = frozenset()

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.required, *self.optional)


SYNTHETIC_KINDS: Final[dict[str, _Kind]] = {
    "constant": _Kind(
        ("qps", "duration"),
        lambda v, arrival, seed: synthetic.constant(v["qps"], v["duration"], arrival=arrival, seed=seed),
    ),
    "poisson": _Kind(
        ("qps", "duration"),
        lambda v, arrival, seed: synthetic.poisson(v["qps"], v["duration"], seed),
    ),
    "step": _Kind(
        ("low", "high", "at", "duration"),
        lambda v, arrival, seed: synthetic.step(
            v["low"], v["high"], v["at"], v["duration"], arrival=arrival, seed=seed
        ),
    ),
    "spike": _Kind(
        ("base", "peak", "at", "width", "duration"),
        lambda v, arrival, seed: synthetic.spike(
            v["base"], v["peak"], v["at"], v["width"], v["duration"], arrival=arrival, seed=seed
        ),
    ),
    "zipf": _Kind(
        ("max_qps", "duration"),
        lambda v, arrival, seed: synthetic.zipf(
            v["max_qps"],
            v["duration"],
            exponent=v["exponent"],
            levels=int(v["levels"]),
            seconds_per_level=v["seconds_per_level"],
            arrival=arrival,
            seed=seed,
        ),
        optional={"exponent": 1.1, "levels": 10, "seconds_per_level": 1.0},
        integers=frozenset({"levels"}),
    ),
}
"""The synthetic kinds: required keys, optional keys with their defaults, and the generator."""


def synthetic_trace(spec: str, *, arrival: str = "poisson", seed: int = 0) -> Trace:
    """Generate the trace that ``synthetic:<kind>:k=v,k=v`` describes (see :data:`TRACE_SPEC_HELP`).

    Raises :class:`TraceError` naming the unknown kind, the unknown, repeated or missing key, or the bad
    value, and listing the valid kinds or keys.
    """
    kind_name, values = _parse_synthetic(spec)
    kind = SYNTHETIC_KINDS[kind_name]
    try:
        return kind.build(values, check_arrival(arrival), seed)
    except TraceError as exc:
        raise TraceError(f"{spec}: {exc.message}") from None


def _parse_synthetic(spec: str) -> tuple[str, dict[str, float]]:
    if not spec.startswith(SYNTHETIC_PREFIX):
        raise TraceError(f"a synthetic trace spec starts with {SYNTHETIC_PREFIX!r}, got {spec!r}")
    kind_name, _, params = spec[len(SYNTHETIC_PREFIX) :].partition(":")
    kind_name = kind_name.strip()
    kind = SYNTHETIC_KINDS.get(kind_name)
    if kind is None:
        raise TraceError(
            f"unknown synthetic trace kind {kind_name!r} in {spec!r}; valid kinds: {', '.join(SYNTHETIC_KINDS)}"
        )
    valid = f"valid keys for synthetic:{kind_name}: {_describe_keys(kind)}"
    values: dict[str, float] = {}
    for item in params.split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep:
            raise TraceError(f"expected key=value in {spec!r}, got {item.strip()!r}; {valid}")
        if key not in kind.keys:
            raise TraceError(f"unknown key {key!r} in {spec!r}; {valid}")
        if key in values:
            raise TraceError(f"key {key!r} is given twice in {spec!r}")
        values[key] = _parse_value(spec, key, raw, integer=key in kind.integers)
    missing = [key for key in kind.required if key not in values]
    if missing:
        raise TraceError(f"{spec!r} is missing {', '.join(missing)}; {valid}")
    return kind_name, {**kind.optional, **values}


def _describe_keys(kind: _Kind) -> str:
    optional = [f"{key} (default {value:g})" for key, value in kind.optional.items()]
    return ", ".join([*kind.required, *optional])


def _parse_value(spec: str, key: str, raw: str, *, integer: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{key}={raw!r} in {spec!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{key}={raw!r} in {spec!r} must be a finite number >= 0")
    if integer and value != int(value):
        raise TraceError(f"{key}={raw!r} in {spec!r} must be a whole number")
    return value


def parse_window(window: str | Sequence[float] | None) -> tuple[float, float] | None:
    """``"START:DURATION"`` (seconds) or a ``(start, duration)`` pair as floats; None stays None.

    START must be >= 0 and DURATION > 0; anything else raises :class:`TraceError` quoting the value.
    """
    if window is None:
        return None
    bad = TraceError(f"window {window!r} is not START:DURATION in seconds (e.g. 0:1200), START >= 0, DURATION > 0")
    parts: Sequence[str | float] = window.split(":") if isinstance(window, str) else window
    if len(parts) != 2:
        raise bad
    try:
        start, length = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise bad from None
    if not (math.isfinite(start) and math.isfinite(length)) or start < 0 or length <= 0:
        raise bad
    return start, length


def guess_format(path: str | Path) -> str:
    """The format of a trace file, from its first line: ``timestamps``, ``azure-functions`` or ``per-second``.

    A header with a ``TIMESTAMP`` column means timestamps; one with ``HashFunction`` or ``minute_N`` columns
    means Azure Functions. A ``.csv`` file with neither is an error (a CSV is never bare counts); any other
    file is taken as per-second counts.
    """
    header = read_header(path)
    names = {name.upper() for name in header}
    if "TIMESTAMP" in names:
        return "timestamps"
    if "HASHFUNCTION" in names or any(name.startswith("MINUTE_") for name in names):
        return "azure-functions"
    if Path(path).suffix.lower() == ".csv":
        raise TraceError(
            "cannot tell the trace format: the header has neither a TIMESTAMP column (request timestamps) "
            "nor HashFunction/minute_N columns (Azure Functions); "
            f"give the format, one of {', '.join(FORMATS)}",
            path=path,
            line=1,
        )
    return "per-second"


def build_trace(
    spec: str | Path,
    *,
    fmt: str | None = None,
    max_qps: float | None = None,
    window: str | tuple[float, float] | None = None,
    drop_zero: bool = False,
    arrival: str = "poisson",
    seed: int = 0,
) -> Trace:
    """Load or generate the trace ``spec`` and window, compact, scale and place its arrivals.

    ``spec`` is a file path (format ``fmt`` or guessed, see :func:`guess_format`) or
    ``synthetic:<kind>:k=v,...``. ``window`` is ``"START:DURATION"`` seconds of trace time, ``drop_zero``
    removes empty bins, ``max_qps`` scales so the busiest bin runs at that many requests per second, and
    ``arrival``/``seed`` place the requests of each bin. The module docstring gives the exact order and how
    timestamp traces are handled. Every problem raises :class:`TraceError`.
    """
    spec = str(spec)
    kind = check_arrival(arrival)
    win = parse_window(window)
    peak = None if max_qps is None else check_positive("max_qps", max_qps)
    if spec.startswith(SYNTHETIC_PREFIX):
        if fmt is not None and fmt != "synthetic":
            raise TraceError(f"{spec!r} is a synthetic spec, but the format {fmt!r} was given")
        trace = synthetic_trace(spec, arrival=kind, seed=seed)
        return _reshape_arrivals(trace, win, drop_zero, peak, kind, seed)
    fmt = guess_format(spec) if fmt is None else fmt
    if fmt == "per-second":
        counts = load_per_second_counts(spec)
        return _reshape_counts(counts, 1.0, f"{spec} (per-second counts)", win, drop_zero, peak, kind, seed)
    if fmt == "azure-functions":
        counts = load_azure_functions_minutes(spec)
        source = f"{spec} (per-minute counts)"
        return _reshape_counts(counts, 60.0, source, win, drop_zero, peak, kind, seed)
    if fmt == "timestamps":
        arrivals, tokens = load_timestamps_with_tokens(spec)
        trace = Trace(arrivals, math.floor(arrivals[-1]) + 1.0, f"{spec} (request timestamps)", tokens)
        return _reshape_arrivals(trace, win, drop_zero, peak, kind, seed)
    raise TraceError(f"unknown trace format {fmt!r}; valid: {', '.join(FORMATS)} (or a synthetic:<kind>:... spec)")


def _reshape_counts(
    counts: npt.NDArray[np.int64],
    bin_s: float,
    source: str,
    win: tuple[float, float] | None,
    drop_zero: bool,
    max_qps: float | None,
    arrival: ArrivalKind,
    seed: int,
) -> Trace:
    """Window, compact and scale a count series (bins of ``bin_s``), then place its arrivals.

    A bin that the window cuts keeps the share of its count that the window covers; its rate (used to find
    the busiest bin) stays that of the whole bin.
    """
    total_s = counts.size * bin_s
    if win is None:
        kept = counts
        frac = np.ones(counts.size)
    else:
        start, length = win
        end = start + length
        if end > total_s * (1 + _EPS):
            raise TraceError(
                f"window {start:g}:{length:g} ends at {end:g} s, past the end of the trace ({total_s:g} s)"
            )
        first = math.floor(start / bin_s + _EPS)
        last = min(math.ceil(end / bin_s - _EPS), counts.size)
        lo = np.arange(first, last, dtype=np.float64) * bin_s
        frac = np.clip((np.minimum(lo + bin_s, end) - np.maximum(lo, start)) / bin_s, 0.0, 1.0)
        kept = counts[first:last]
        source += f", window {start:g}:{length:g} s"
    whole_bins = kept.astype(np.float64)
    return _finish(
        whole_bins * frac,
        frac * bin_s,
        kept > 0,
        whole_bins,
        bin_s,
        source,
        drop_zero,
        max_qps,
        arrival,
        seed,
    )


def _reshape_arrivals(
    trace: Trace,
    win: tuple[float, float] | None,
    drop_zero: bool,
    max_qps: float | None,
    arrival: ArrivalKind,
    seed: int,
) -> Trace:
    """Window a trace exactly; to drop zero seconds or scale, go through its per-second counts."""
    if win is not None:
        trace = trace.window(*win)
    if max_qps is None and not drop_zero:
        return trace
    counts = trace.per_second_counts()
    widths = np.ones(counts.size)
    widths[-1] = trace.duration_s - (counts.size - 1)
    if max_qps is None:
        return _close_empty_seconds(trace, counts, widths)
    # The busiest second is looked for among whole seconds: a sliver of a second at the end is too noisy.
    whole = widths >= 1 - _EPS
    amounts = counts.astype(np.float64)
    peak_basis = np.where(whole, amounts, 0.0) if whole.any() else amounts / widths
    source = f"{trace.source}, binned per second"
    out = _finish(amounts, widths, counts > 0, peak_basis, 1.0, source, drop_zero, max_qps, arrival, seed)
    if trace.tokens is None or not len(trace.tokens):
        return out
    # the arrivals are new: each takes the tokens of a request of the window, drawn with the trace's seed
    pick = np.random.default_rng([seed, 1]).integers(0, len(trace.tokens), len(out))
    return Trace(out.arrivals, out.duration_s, f"{out.source}, tokens drawn from the window's", trace.tokens[pick])


def _close_empty_seconds(trace: Trace, counts: npt.NDArray[np.int64], widths: npt.NDArray[np.float64]) -> Trace:
    """Remove the seconds without requests and close the gaps, keeping each arrival's offset in its second."""
    keep = counts > 0
    if not keep.any():
        raise TraceError(f"nothing is left of {trace.source} after dropping zero seconds: it has no requests")
    kept_widths = np.where(keep, widths, 0.0)
    ends = np.cumsum(kept_widths)
    seconds = np.floor(trace.arrivals).astype(np.int64)
    arrivals = (ends - kept_widths)[seconds] + (trace.arrivals - seconds)
    duration = float(ends[-1])
    arrivals = np.minimum(arrivals, np.nextafter(duration, 0.0))
    return Trace(arrivals, duration, f"{trace.source}, zero seconds dropped", trace.tokens)


def _finish(
    amounts: npt.NDArray[np.float64],
    widths: npt.NDArray[np.float64],
    nonzero: npt.NDArray[np.bool_],
    peak_basis: npt.NDArray[np.float64],
    bin_s: float,
    source: str,
    drop_zero: bool,
    max_qps: float | None,
    arrival: ArrivalKind,
    seed: int,
) -> Trace:
    """Drop zero bins, scale, round and place arrivals in bins of ``widths`` seconds laid end to end.

    ``amounts`` are the requests in each bin before scaling; ``peak_basis`` is, per bin, the count a whole
    ``bin_s`` bin would hold at that bin's rate: the largest is scaled to ``max_qps * bin_s``, every amount
    by the same factor (as :func:`~cascadeserve.traces.counts.scale_counts`), then rounded with ``np.rint``.
    """
    keep = widths > _EPS * bin_s
    if drop_zero:
        keep &= nonzero
        source += ", zero bins dropped"
    amounts, widths, peak_basis = amounts[keep], widths[keep], peak_basis[keep]
    if amounts.size == 0:
        raise TraceError(f"nothing is left of {source}: it has no requests")
    scale = 1.0
    if max_qps is not None:
        peak = float(peak_basis.max())
        if peak == 0:
            raise TraceError(f"cannot scale {source} to a maximum QPS: it has no requests")
        scale = max_qps * bin_s / peak
        source += f", scaled to max {max_qps:g} QPS"
    counts = np.rint(amounts * scale).astype(np.int64)
    ends = np.cumsum(widths)
    duration = float(ends[-1])
    rng = np.random.default_rng(seed)
    arrivals = arrivals_in_bins(counts, ends - widths, widths, duration, arrival, rng)
    return Trace(arrivals, duration, f"{source}, {arrival} arrivals (seed {seed})")
