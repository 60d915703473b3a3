"""build_trace: the one trace spec (file or synthetic), window, drop_zero, max_qps, arrivals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascadeserve.errors import TraceError
from cascadeserve.traces import (
    SYNTHETIC_KINDS,
    TRACE_SPEC_HELP,
    arrivals_from_counts,
    build_trace,
    guess_format,
    parse_window,
    scale_counts,
)

SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
needs_shared = pytest.mark.skipif(
    not SHARED_TRACES.exists(), reason=f"shared reference data not present at {SHARED_TRACES}"
)


@pytest.fixture
def per_second(tmp_path: Path) -> Path:
    path = tmp_path / "counts.txt"
    path.write_text("4 0 2 8 0 6\n")
    return path


@pytest.fixture
def timestamps(tmp_path: Path) -> Path:
    path = tmp_path / "llm.csv"
    path.write_text("TIMESTAMP,ContextTokens\n0.2,1\n0.7,1\n3.5,1\n3.6,1\n3.9,1\n5.25,1\n")
    return path


@pytest.fixture
def functions(tmp_path: Path) -> Path:
    path = tmp_path / "inv.csv"
    path.write_text("HashFunction,HashApp,HashOwner,minute_1,minute_2,minute_3\nf,a,o,60,0,120\ng,a,o,0,0,60\n")
    return path


# ---------------------------------------------------------------------------------------------------------
# Per-second counts


def test_per_second_file_with_uniform_arrivals(per_second: Path) -> None:
    trace = build_trace(str(per_second), arrival="uniform")
    np.testing.assert_array_equal(trace.per_second_counts(), [4, 0, 2, 8, 0, 6])
    np.testing.assert_array_equal(trace.arrivals[:4], [0.125, 0.375, 0.625, 0.875])
    assert trace.duration_s == 6
    assert "per-second counts" in trace.source


def test_max_qps_scales_the_busiest_second_exactly(per_second: Path) -> None:
    trace = build_trace(str(per_second), max_qps=100, seed=3)
    np.testing.assert_array_equal(trace.per_second_counts(), [50, 0, 25, 100, 0, 75])
    assert trace.max_qps == 100
    expected = arrivals_from_counts(scale_counts([4, 0, 2, 8, 0, 6], 100), seed=3)
    np.testing.assert_array_equal(trace.arrivals, expected)


def test_drop_zero_removes_empty_seconds_before_scaling(per_second: Path) -> None:
    trace = build_trace(str(per_second), drop_zero=True, max_qps=80)
    np.testing.assert_array_equal(trace.per_second_counts(), [40, 20, 80, 60])
    assert trace.duration_s == 4
    assert "zero bins dropped" in trace.source


def test_window_is_applied_before_scaling(per_second: Path) -> None:
    trace = build_trace(str(per_second), window="1:3", max_qps=10)
    np.testing.assert_array_equal(trace.per_second_counts(), [0, 2, 10])
    trace = build_trace(str(per_second), window=(2.0, 4.0), drop_zero=True)
    np.testing.assert_array_equal(trace.per_second_counts(), [2, 8, 6])


def test_a_window_that_cuts_seconds_keeps_their_share(per_second: Path) -> None:
    trace = build_trace(str(per_second), window="2.5:1.5", arrival="uniform")
    assert trace.duration_s == 1.5
    assert len(trace) == 1 + 8  # half of second 2 (count 2), all of second 3 (count 8)
    np.testing.assert_array_equal(trace.per_second_counts(), [1 + 4, 4])


def test_same_seed_same_trace(per_second: Path) -> None:
    first = build_trace(str(per_second), seed=11)
    np.testing.assert_array_equal(first.arrivals, build_trace(str(per_second), seed=11).arrivals)
    assert not np.array_equal(first.arrivals, build_trace(str(per_second), seed=12).arrivals)


# ---------------------------------------------------------------------------------------------------------
# Azure Functions per-minute counts


def test_per_minute_counts_spread_over_sixty_seconds(functions: Path) -> None:
    trace = build_trace(str(functions), arrival="uniform")
    assert trace.duration_s == 180
    np.testing.assert_array_equal(trace.per_second_counts(), [1] * 60 + [0] * 60 + [3] * 60)


def test_per_minute_scaling_targets_a_per_second_rate(functions: Path) -> None:
    # Minute totals 60, 0, 180: the busiest minute runs at 3 QPS and becomes 9 QPS (540 in the minute).
    trace = build_trace(str(functions), max_qps=9, drop_zero=True, arrival="uniform")
    assert trace.duration_s == 120
    np.testing.assert_array_equal(trace.per_second_counts(), [3] * 60 + [9] * 60)


def test_per_minute_window_in_seconds(functions: Path) -> None:
    trace = build_trace(str(functions), window="30:120", arrival="uniform")
    assert trace.duration_s == 120
    np.testing.assert_array_equal(trace.per_second_counts(), [1] * 30 + [0] * 60 + [3] * 30)
    scaled = build_trace(str(functions), window="30:60", max_qps=6, arrival="uniform")
    # The busiest minute in the window runs at 1 QPS (the other is empty): it becomes 6 QPS.
    np.testing.assert_array_equal(scaled.per_second_counts(), [6] * 30 + [0] * 30)


# ---------------------------------------------------------------------------------------------------------
# Timestamps


def test_timestamps_are_kept_exactly_without_max_qps(timestamps: Path) -> None:
    trace = build_trace(str(timestamps))
    np.testing.assert_allclose(trace.arrivals, [0.0, 0.5, 3.3, 3.4, 3.7, 5.05])
    assert trace.duration_s == 6
    window = build_trace(str(timestamps), window="3:2")
    np.testing.assert_allclose(window.arrivals, [0.3, 0.4, 0.7])


def test_timestamps_drop_zero_closes_the_gaps_exactly(timestamps: Path) -> None:
    trace = build_trace(str(timestamps), drop_zero=True)
    np.testing.assert_allclose(trace.arrivals, [0.0, 0.5, 1.3, 1.4, 1.7, 2.05])
    assert trace.duration_s == 3


def test_timestamps_with_max_qps_are_binned_scaled_and_regenerated(timestamps: Path) -> None:
    trace = build_trace(str(timestamps), max_qps=30, arrival="uniform")
    np.testing.assert_array_equal(trace.per_second_counts(), [20, 0, 0, 30, 0, 10])
    assert "binned per second" in trace.source


def test_a_trace_with_token_columns_keeps_each_requests_tokens(tmp_path: Path) -> None:
    path = tmp_path / "llm.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n3.4,340,34\n0.0,100,10\n5.05,505,50\n0.5,150,15\n3.3,330,33\n"
    )
    trace = build_trace(str(path))
    assert trace.tokens is not None  # sorted with the arrivals
    assert trace.tokens.tolist() == [[100, 10], [150, 15], [330, 33], [340, 34], [505, 50]]
    window = build_trace(str(path), window="3:2")
    assert window.tokens is not None and window.tokens.tolist() == [[330, 33], [340, 34]]
    closed = build_trace(str(path), drop_zero=True)
    assert closed.tokens is not None and closed.tokens.tolist() == trace.tokens.tolist()
    scaled = build_trace(str(path), max_qps=30, seed=3)  # new arrivals: each takes the tokens of one of the five
    assert scaled.tokens is not None and len(scaled.tokens) == len(scaled)
    assert {tuple(t) for t in scaled.tokens.tolist()} <= {tuple(t) for t in trace.tokens.tolist()}
    assert build_trace(str(path), max_qps=30, seed=3).tokens.tolist() == scaled.tokens.tolist()  # type: ignore[union-attr]


def test_a_bad_token_count_names_the_line_and_the_column(tmp_path: Path) -> None:
    path = tmp_path / "llm.csv"
    path.write_text("TIMESTAMP,prompt_tokens,output_tokens\n0.0,10,1\n1.0,-4,1\n")
    with pytest.raises(TraceError, match=r"llm.csv, line 3, column prompt_tokens: '-4' is not a token count"):
        build_trace(str(path))


def test_a_trace_without_token_columns_has_none(timestamps: Path) -> None:
    assert build_trace(str(timestamps)).tokens is None


# ---------------------------------------------------------------------------------------------------------
# Synthetic specs


@pytest.mark.parametrize(
    ("spec", "requests", "duration"),
    [
        ("synthetic:constant:qps=200,duration=60", 12_000, 60),
        ("synthetic:step:low=100,high=800,at=30,duration=60", 27_000, 60),
        ("synthetic:spike:base=100,peak=1000,at=20,width=5,duration=60", 10_500, 60),
    ],
)
def test_synthetic_specs(spec: str, requests: int, duration: float) -> None:
    trace = build_trace(spec)
    assert len(trace) == requests
    assert trace.duration_s == duration


def test_synthetic_poisson_and_zipf_specs() -> None:
    assert len(build_trace("synthetic:poisson:qps=200,duration=60")) == pytest.approx(12_000, rel=0.05)
    zipf = build_trace("synthetic:zipf:max_qps=1000,duration=120,exponent=1.1", seed=2)
    assert zipf.duration_s == 120
    assert zipf.max_qps <= 1000
    levels = build_trace("synthetic:zipf:max_qps=1000,duration=30,levels=2,seconds_per_level=5")
    assert set(levels.per_second_counts().tolist()) <= {500, 1000}


def test_synthetic_with_window_and_max_qps() -> None:
    trace = build_trace("synthetic:step:low=10,high=20,at=5,duration=10", window="3:4", max_qps=40)
    np.testing.assert_array_equal(trace.per_second_counts(), [20, 20, 40, 40])


KINDS = "constant, poisson, step, spike, zipf"
ZIPF_KEYS = "max_qps, duration, exponent \\(default 1.1\\), levels \\(default 10\\), seconds_per_level \\(default 1\\)"
BAD_SPECS = [
    ("synthetic:sine:qps=1", f"unknown synthetic trace kind 'sine'.*valid kinds: {KINDS}"),
    (
        "synthetic:constant:qps=1,duration=5,rate=3",
        "unknown key 'rate'.*valid keys for synthetic:constant: qps, duration",
    ),
    ("synthetic:step:low=1,high=2,duration=5", "is missing at; valid keys for synthetic:step: low, high, at, duration"),
    ("synthetic:constant", "is missing qps, duration"),
    ("synthetic:constant:qps=fast,duration=5", "qps='fast' in .* is not a number"),
    ("synthetic:constant:qps=-1,duration=5", "qps='-1' in .* must be a finite number >= 0"),
    ("synthetic:constant:qps=1,qps=2,duration=5", "key 'qps' is given twice"),
    ("synthetic:constant:qps,duration=5", "expected key=value .* got 'qps'"),
    ("synthetic:zipf:max_qps=9,duration=5,levels=2.5", "levels='2.5' in .* must be a whole number"),
    ("synthetic:zipf:max_qps=9,duration=5,bogus=1", f"valid keys for synthetic:zipf: {ZIPF_KEYS}"),
    ("synthetic:step:low=1,high=2,at=9,duration=5", "synthetic:step:low=1,high=2,at=9,duration=5: at_s must lie"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_bad_synthetic_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        build_trace(spec)


def test_every_synthetic_kind_is_documented() -> None:
    for kind in SYNTHETIC_KINDS:
        assert f"synthetic:{kind}:" in TRACE_SPEC_HELP


# ---------------------------------------------------------------------------------------------------------
# Formats, windows and options


def test_formats_are_guessed_from_the_first_line(
    per_second: Path, timestamps: Path, functions: Path, tmp_path: Path
) -> None:
    assert guess_format(per_second) == "per-second"
    assert guess_format(timestamps) == "timestamps"
    assert guess_format(functions) == "azure-functions"
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match=r"other.csv, line 1: cannot tell the trace format"):
        guess_format(other)


def test_an_explicit_format_wins(timestamps: Path) -> None:
    with pytest.raises(TraceError, match=r"line 1, column 1: 'TIMESTAMP,ContextTokens' is not a whole number"):
        build_trace(str(timestamps), fmt="per-second")
    with pytest.raises(
        TraceError, match=r"unknown trace format 'json'; valid: per-second, timestamps, azure-functions"
    ):
        build_trace(str(timestamps), fmt="json")
    with pytest.raises(TraceError, match="is a synthetic spec"):
        build_trace("synthetic:constant:qps=1,duration=2", fmt="timestamps")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope.txt: no such trace file"):
        build_trace(str(tmp_path / "nope.txt"))


@pytest.mark.parametrize("window", ["10", "a:b", "1:0", "-1:5", "1:2:3", (1.0,), "1:inf"])
def test_bad_windows_are_quoted(window: str | tuple[float, ...]) -> None:
    with pytest.raises(TraceError, match=r"is not START:DURATION in seconds"):
        parse_window(window)


def test_window_past_the_end_and_bad_options(per_second: Path) -> None:
    assert parse_window(" 0 : 1200 ") == (0.0, 1200.0)
    with pytest.raises(TraceError, match=r"window 4:5 ends at 9 s, past the end of the trace \(6 s\)"):
        build_trace(str(per_second), window="4:5")
    with pytest.raises(TraceError, match="max_qps must be a finite number > 0"):
        build_trace(str(per_second), max_qps=0)
    with pytest.raises(TraceError, match="unknown arrival process"):
        build_trace(str(per_second), arrival="fixed")
    with pytest.raises(TraceError, match="no requests"):
        build_trace(str(per_second), window="4:1", drop_zero=True)
    with pytest.raises(TraceError, match="no requests"):
        build_trace(str(per_second), window="4:1", max_qps=5)


# ---------------------------------------------------------------------------------------------------------
# The real traces (the paper's settings)


@needs_shared
def test_paper_setting_for_the_twitter_trace() -> None:
    path = SHARED_TRACES / "twitter_2021" / "tweets_per_second.txt"
    trace = build_trace(str(path), window="0:1200", drop_zero=True, max_qps=7600, seed=0)
    assert trace.max_qps == 7600
    assert trace.duration_s <= 1200
    assert (np.diff(trace.arrivals) >= 0).all()


@needs_shared
def test_paper_setting_for_the_azure_traces() -> None:
    functions = SHARED_TRACES / "azure_functions_2019_sample" / "invitro_1000_inv.csv"
    trace = build_trace(str(functions), window="3600:1200", max_qps=60, drop_zero=True)
    assert trace.duration_s == 1200
    assert trace.mean_qps <= 60
    llm = SHARED_TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    exact = build_trace(str(llm))
    assert len(exact) == 19_366
    assert exact.tokens is not None and exact.tokens[0].tolist() == [374, 44]  # the first request's, in the file
    assert exact.max_qps == 16
    assert build_trace(str(llm), max_qps=60, drop_zero=True).max_qps == 60
