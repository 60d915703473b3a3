"""Trace file readers: per-second counts, request timestamps, Azure Functions per-minute counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadeserve.errors import TraceError
from cascadeserve.traces import load_azure_functions_minutes, load_per_second_counts, load_timestamps

SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
TWITTER = SHARED_TRACES / "twitter_2021" / "tweets_per_second.txt"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------
# Per-second counts


def test_counts_across_several_lines_and_whitespace(tmp_path: Path) -> None:
    path = write(tmp_path, "c.txt", "3 0  7\n\t12\r\n\n5 \n")
    counts = load_per_second_counts(path)
    np.testing.assert_array_equal(counts, [3, 0, 7, 12, 5])
    assert counts.dtype == np.int64


def test_counts_on_one_line_without_newline(tmp_path: Path) -> None:
    np.testing.assert_array_equal(load_per_second_counts(write(tmp_path, "c.txt", "52 55 48")), [52, 55, 48])


def test_a_negative_count_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "c.txt", "1 2 3\n4 -5 6\n")
    with pytest.raises(TraceError) as info:
        load_per_second_counts(path)
    assert info.value.line == 2
    assert info.value.column == 3
    assert str(info.value) == f"{path}, line 2, column 3: negative request count -5 (token 2 on this line)"


def test_an_unparsable_token_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "c.txt", "1 2\n3 4\n  10 1x2\n")
    with pytest.raises(TraceError) as info:
        load_per_second_counts(path)
    assert (info.value.path, info.value.line, info.value.column) == (str(path), 3, 6)
    assert "'1x2' is not a whole number of requests (token 2 on this line)" in str(info.value)


def test_a_fractional_count_is_not_a_count(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"line 1, column 1: '2.5' is not a whole number"):
        load_per_second_counts(write(tmp_path, "c.txt", "2.5 3"))


def test_a_count_too_large_for_int64_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"column 3: request count 99999999999999999999 is too large"):
        load_per_second_counts(write(tmp_path, "c.txt", "1 99999999999999999999"))


def test_long_but_fitting_tokens_take_the_checking_path(tmp_path: Path) -> None:
    path = write(tmp_path, "c.txt", "0000000000000000000007 9223372036854775807")
    np.testing.assert_array_equal(load_per_second_counts(path), [7, 2**63 - 1])


@pytest.mark.parametrize("text", ["", "  \n\n "])
def test_an_empty_counts_file_is_an_error(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "c.txt", text)
    with pytest.raises(TraceError, match=r"the file is empty") as info:
        load_per_second_counts(path)
    assert info.value.path == str(path)


def test_a_missing_file_or_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope.txt: no such trace file"):
        load_per_second_counts(tmp_path / "nope.txt")
    with pytest.raises(TraceError, match="is a directory"):
        load_per_second_counts(tmp_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(0, 10**12), min_size=1, max_size=50),
    separators=st.lists(st.sampled_from([" ", "  ", "\n", "\t", "\r\n", " \n "]), min_size=50, max_size=50),
)
def test_counts_round_trip_whatever_the_whitespace(tmp_path: Path, counts: list[int], separators: list[str]) -> None:
    text = "".join(f"{c}{sep}" for c, sep in zip(counts, separators, strict=False))
    np.testing.assert_array_equal(load_per_second_counts(write(tmp_path, "c.txt", text)), counts)


@pytest.mark.skipif(not TWITTER.exists(), reason=f"shared reference data not present at {TWITTER}")
def test_the_real_twitter_trace_loads() -> None:
    # No wall-clock bound: at load 16-26 on 2 cores this took 2.2 s with nothing wrong (its speed is a benchmark
    # figure, not a test outcome).
    counts = load_per_second_counts(TWITTER)
    # Figures from ../shared/data/README.md.
    assert counts.size == 1_899_061
    assert counts.max() == 388
    assert (counts == 0).sum() == 37_899
    assert counts.mean() == pytest.approx(63.6, abs=0.05)


# ---------------------------------------------------------------------------------------------------------
# Timestamps


AZURE_LLM = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:46.1805900,1,2
"""


def test_datetime_timestamps_become_sorted_seconds_since_the_first(tmp_path: Path) -> None:
    seconds = load_timestamps(write(tmp_path, "llm.csv", AZURE_LLM))
    np.testing.assert_allclose(seconds, [0.0, 0.5, 4.814579], atol=1e-9)
    assert seconds.dtype == np.float64


def test_numeric_timestamps_and_a_header_without_trailing_newline(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "id,timestamp\na,12.5\nb,10\nc,11.25")
    np.testing.assert_allclose(load_timestamps(path), [0.0, 1.25, 2.5])


def test_blank_lines_are_skipped_and_lines_counted(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "TIMESTAMP\n1\n\n2\nthree\n")
    with pytest.raises(TraceError) as info:
        load_timestamps(path)
    assert (info.value.line, info.value.column) == (5, "TIMESTAMP")
    assert "'three' is not a finite number of seconds" in str(info.value)


def test_a_missing_timestamp_column_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "time,tokens\n1,2\n")
    with pytest.raises(TraceError, match=r"line 1: no TIMESTAMP column in the header \(columns: 'time', 'tokens'\)"):
        load_timestamps(path)


def test_a_bad_datetime_names_its_line(tmp_path: Path) -> None:
    text = "TIMESTAMP,x\n2023-11-16 18:15:46.68,1\n2023-11-16 25:99:00,2\n"
    with pytest.raises(TraceError, match=r"line 3, column TIMESTAMP: cannot read '2023-11-16 25:99:00'"):
        load_timestamps(write(tmp_path, "t.csv", text))


def test_nat_is_not_a_timestamp(tmp_path: Path) -> None:
    text = "TIMESTAMP\n2023-11-16 18:15:46\nNaT\n"
    with pytest.raises(TraceError, match=r"line 3, column TIMESTAMP: cannot read 'NaT'"):
        load_timestamps(write(tmp_path, "t.csv", text))


def test_short_rows_and_empty_values_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"line 3, column TIMESTAMP: the row has 1 field\(s\), so no TIMESTAMP"):
        load_timestamps(write(tmp_path, "t.csv", "x,TIMESTAMP\n1,2\n3\n"))
    with pytest.raises(TraceError, match=r"line 2, column TIMESTAMP: empty timestamp"):
        load_timestamps(write(tmp_path, "t.csv", "TIMESTAMP,x\n,2\n"))


def test_a_timestamps_file_without_rows_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="header but no requests"):
        load_timestamps(write(tmp_path, "t.csv", "TIMESTAMP,x\n"))
    with pytest.raises(TraceError, match="the file is empty"):
        load_timestamps(write(tmp_path, "t.csv", ""))


# ---------------------------------------------------------------------------------------------------------
# Azure Functions per-minute counts


def test_minutes_are_summed_over_functions(tmp_path: Path) -> None:
    text = "HashFunction,HashApp,HashOwner,minute_1,minute_2,minute_3\nf,a,o,1,0,5\ng,a,o,2,3,0\n"
    minutes = load_azure_functions_minutes(write(tmp_path, "f.csv", text))
    np.testing.assert_array_equal(minutes, [3, 3, 5])
    assert minutes.dtype == np.int64


def test_minute_columns_are_ordered_by_number(tmp_path: Path) -> None:
    text = "minute_2,HashFunction,minute_1\n7,f,1\n"
    np.testing.assert_array_equal(load_azure_functions_minutes(write(tmp_path, "f.csv", text)), [1, 7])


def test_missing_or_gapped_minute_columns_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"line 1: no minute_1..minute_N columns in the header"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", "HashFunction,count\nf,1\n"))
    with pytest.raises(TraceError, match=r"line 1: the minute columns have a gap: no minute_2"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", "minute_1,minute_3\n1,2\n"))


def test_bad_invocation_counts_name_line_and_column(tmp_path: Path) -> None:
    header = "HashFunction,minute_1,minute_2\n"
    with pytest.raises(TraceError, match=r"line 3, column minute_2: negative invocation count -4"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", header + "f,1,2\ng,3,-4\n"))
    with pytest.raises(TraceError, match=r"line 2, column minute_1: 'x' is not a whole number"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", header + "f,x,2\n"))
    with pytest.raises(TraceError, match=r"line 2, column minute_2: empty count"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", header + "f,1,\n"))
    with pytest.raises(TraceError, match=r"line 2, column minute_2: the row has 2 fields, the header 3"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", header + "f,1\n"))
    with pytest.raises(TraceError, match="no functions"):
        load_azure_functions_minutes(write(tmp_path, "f.csv", header))
