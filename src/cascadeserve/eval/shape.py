"""The workload a comparison replays: the paper's shape of the Twitter trace by default, and every choice said.

The paper (§6.1) replays the Twitter trace's **first 20 minutes with the zero seconds removed, scaled to a peak
of 7,600 QPS** (about 5.8 million requests). ``compare`` and ``report`` use that shape whenever the trace is the
Twitter trace (a per-second count file named ``tweets_per_second.txt``, the public dataset's name) and the user
leaves the choice open: each of the window, the zero-second removal and the peak that the user does not give
takes the paper's value. For any other trace nothing is assumed: the whole trace, zero seconds kept, and the peak
scaled to what ``capacity_devices`` devices serve with the most accurate model (``compare``'s older default),
except a synthetic trace in ``compare``, which runs at its own rate.

Nothing is silently shortened: the window is the one asked for (or the paper's, said so), every system replays
all of its requests, and :meth:`WorkloadShape.describe` names each choice and where it came from, so ``compare``
and ``report`` can print it next to the result. The one bound on simulated requests inside a comparison is the
planner's own: each SP4 stability check simulates at most ``Planner(sim_requests=…)`` requests (20,000) and 6 s
at one QPS range's load; it checks a gear, it is not the replay the cells are judged on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "PAPER_DROP_ZERO",
    "PAPER_MAX_QPS",
    "PAPER_WINDOW",
    "TWITTER_TRACE_NAME",
    "WorkloadShape",
    "is_twitter_trace",
    "workload_shape",
]

PAPER_WINDOW: Final = "0:1200"
PAPER_DROP_ZERO: Final = True
PAPER_MAX_QPS: Final = 7600.0
TWITTER_TRACE_NAME: Final = "tweets_per_second.txt"
_PAPER = "the paper's default for the Twitter trace, §6.1"


def is_twitter_trace(spec: str) -> bool:
    """Whether ``spec`` is the Twitter trace file (by the public dataset's file name)."""
    return not spec.startswith("synthetic:") and Path(spec).name == TWITTER_TRACE_NAME


@dataclass(frozen=True)
class WorkloadShape:
    """The window, zero-second removal and peak a comparison uses, and a phrase per choice saying why.

    ``max_qps`` is ``None`` when the peak is not fixed here: the caller scales to ``capacity_devices`` devices'
    capacity (``family_scaled``), or (a synthetic trace in ``compare``) keeps the trace's own rate.
    """

    window: str | None
    drop_zero: bool
    max_qps: float | None
    capacity_devices: int
    family_scaled: bool
    window_why: str
    drop_zero_why: str
    peak_why: str

    def describe(self, requests: int | None = None, peak_qps: float | None = None) -> str:
        """One sentence: each choice and its source; with ``requests``, that every system replays all of them."""
        window = f"window {self.window} s" if self.window else "the whole trace"
        zero = "zero seconds dropped" if self.drop_zero else "zero seconds kept"
        peak = f"peak {peak_qps:g} QPS" if peak_qps is not None else "peak as scaled below"
        parts = [f"{window} ({self.window_why})", f"{zero} ({self.drop_zero_why})", f"{peak} ({self.peak_why})"]
        tail = f"; every system replays all {requests:,} requests, nothing shortened" if requests is not None else ""
        return "workload: " + ", ".join(parts) + tail

    def to_dict(self) -> dict[str, object]:
        return {
            "window": self.window,
            "window_source": self.window_why,
            "drop_zero": self.drop_zero,
            "drop_zero_source": self.drop_zero_why,
            "max_qps": self.max_qps,
            "peak_source": self.peak_why,
            "capacity_devices": self.capacity_devices,
        }


def workload_shape(
    trace: str,
    *,
    window: str | None,
    drop_zero: bool | None,
    max_qps: float | None,
    capacity_devices: int | None,
    scale_synthetic: bool = False,
    default_capacity_devices: int = 4,
) -> WorkloadShape:
    """Resolve the options the user left open (``None``) as the module docstring says.

    ``capacity_devices`` given asks for the family scaling even on the Twitter trace; ``scale_synthetic``
    (``report``) scales a synthetic trace by the family rule too.
    """
    twitter = is_twitter_trace(trace)
    synthetic = trace.startswith("synthetic:")
    if window is not None:
        win, win_why = window, "given"
    elif twitter:
        win, win_why = PAPER_WINDOW, _PAPER
    else:
        win, win_why = None, "no --window given"
    if drop_zero is not None:
        dz, dz_why = drop_zero, "given"
    elif twitter:
        dz, dz_why = PAPER_DROP_ZERO, _PAPER
    else:
        dz, dz_why = False, "no --drop-zero given"
    cap = capacity_devices if capacity_devices is not None else default_capacity_devices
    if max_qps is not None:
        peak, family, why = max_qps, False, f"--max-qps {max_qps:g} given"
    elif capacity_devices is None and twitter:
        peak, family, why = PAPER_MAX_QPS, False, _PAPER
    elif synthetic and not scale_synthetic:
        peak, family, why = None, False, "the synthetic trace at its own rate"
    else:
        given = "given" if capacity_devices is not None else "default"
        peak, family, why = None, True, f"what --capacity-devices {cap} ({given}) serve with the most accurate model"
    return WorkloadShape(win, dz, peak, cap, family, win_why, dz_why, why)
