"""Readers for the public request traces in ``../shared/data/traces`` (see its README).

Three formats:

* per-second counts (:func:`load_per_second_counts`): whitespace-separated non-negative integers, one per
  second, on one or several lines (the Twitter 2021 stream, 1.9 M seconds on one line).
* request timestamps (:func:`load_timestamps`): a CSV with a header naming a ``TIMESTAMP`` column, one row
  per request (Azure LLM inference 2023: ``2023-11-16 18:15:46.6805900``); the column may also hold plain
  numbers of seconds.
* per-minute invocation counts (:func:`load_azure_functions_minutes`): the Azure Functions 2019 CSV
  ``HashFunction,HashApp,HashOwner,minute_1..minute_1440``, summed over all functions (rows).

Every problem is a :class:`~cascadeserve.errors.TraceError` naming the file and, where known, the line
(1-based) and the column: a 1-based character position for counts files, the column name for CSV files.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from cascadeserve.errors import TraceError

__all__ = [
    "load_azure_functions_minutes",
    "load_per_second_counts",
    "load_timestamps",
    "load_timestamps_with_tokens",
    "read_header",
]

PathLike = str | Path

# An int64 holds every 18-digit number; longer tokens go through the slow, checking parser.
_MAX_FAST_DIGITS = 18
_WHITESPACE_AND_DIGITS = b"0123456789 \t\r\n"
_MINUTE_COLUMN = re.compile(r"minute_(\d+)")


def _read_bytes(path: PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceError("no such trace file", path=path) from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path=path) from None
    except OSError as exc:
        raise TraceError(f"cannot read the trace file: {exc.strerror or exc}", path=path) from None


def _read_text(path: PathLike) -> str:
    return _read_bytes(path).decode("utf-8-sig", errors="replace")


def read_header(path: PathLike, limit: int = 1 << 16) -> list[str]:
    """The comma-separated fields of the first line of ``path`` (stripped), for telling formats apart."""
    try:
        with Path(path).open("rb") as handle:
            first = handle.readline(limit)
    except FileNotFoundError:
        raise TraceError("no such trace file", path=path) from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path=path) from None
    except OSError as exc:
        raise TraceError(f"cannot read the trace file: {exc.strerror or exc}", path=path) from None
    line = first.decode("utf-8-sig", errors="replace")
    return [field.strip() for field in line.split(",")]


# ----------------------------------------------------------------------------------------------------------
# Per-second counts


def load_per_second_counts(path: PathLike) -> npt.NDArray[np.int64]:
    """Read whitespace-separated non-negative integer counts (any number of lines) as an ``int64`` array.

    A file of only digits and whitespace is parsed by numpy in one pass (the 1.9 M-number Twitter file takes
    about 0.05 s); anything else goes through a checking parser that reports the first bad token with its
    line and 1-based character column: a negative count, a token that is not an integer, or a number too
    large for ``int64``. An empty file is an error too.
    """
    data = _read_bytes(path)
    if not data.strip():
        raise TraceError("the file is empty; expected whitespace-separated per-second request counts", path=path)
    if not data.translate(None, _WHITESPACE_AND_DIGITS):
        fast = _parse_digits_fast(data)
        if fast is not None:
            return fast
    return _parse_counts_checked(data, path)


def _parse_digits_fast(data: bytes) -> npt.NDArray[np.int64] | None:
    """Parse a buffer holding only ASCII digits and whitespace, or return None if a token is too long."""
    raw = np.frombuffer(data, dtype=np.uint8)
    digit = (raw >= ord("0")) & (raw <= ord("9"))
    edges = np.flatnonzero(np.diff(digit.astype(np.int8)))
    # Runs of digits start after a rising edge (or at 0) and end after a falling edge (or at the end).
    starts = edges[digit[edges + 1]] + 1
    ends = edges[~digit[edges + 1]] + 1
    if digit[0]:
        starts = np.concatenate(([0], starts))
    if digit[-1]:
        ends = np.concatenate((ends, [raw.size]))
    if starts.size == 0 or (ends - starts).max() > _MAX_FAST_DIGITS:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = np.fromstring(data, dtype=np.int64, sep=" ")
    return counts if counts.size == starts.size else None


def _parse_counts_checked(data: bytes, path: PathLike) -> npt.NDArray[np.int64]:
    """Token-by-token parser that names the line and column of the first bad token."""
    text = data.decode("utf-8", errors="replace")
    values: list[int] = []
    limit = np.iinfo(np.int64).max
    for line_no, line in enumerate(text.split("\n"), start=1):
        for index, match in enumerate(re.finditer(r"\S+", line), start=1):
            token = match.group()
            try:
                value = int(token)
            except ValueError:
                problem = f"{token!r} is not a whole number of requests"
            else:
                if value < 0:
                    problem = f"negative request count {token}"
                elif value > limit:
                    problem = f"request count {token} is too large"
                else:
                    values.append(value)
                    continue
            raise TraceError(
                f"{problem} (token {index} on this line)", path=path, line=line_no, column=match.start() + 1
            )
    if not values:
        raise TraceError("the file holds no counts", path=path)
    return np.array(values, dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------
# CSV helpers


def _csv_rows(path: PathLike) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Return the stripped header and the non-blank data rows of a CSV, each with its 1-based line number."""
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError("the file is empty; expected a CSV header line", path=path) from None
    except csv.Error as exc:
        raise TraceError(f"malformed CSV: {exc}", path=path, line=reader.line_num) from None
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if row and any(field.strip() for field in row):
                rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise TraceError(f"malformed CSV: {exc}", path=path, line=reader.line_num) from None
    return [field.strip() for field in header], rows


def _describe_columns(header: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(field) for field in header[:limit])
    return shown + (f", ... ({len(header)} in all)" if len(header) > limit else "")


# ----------------------------------------------------------------------------------------------------------
# Timestamps


def load_timestamps(path: PathLike) -> npt.NDArray[np.float64]:
    """Read request times from a CSV with a ``TIMESTAMP`` column; return sorted seconds since the first one.

    The header line is required and must name a ``TIMESTAMP`` column (matched case-insensitively). Its values
    are date-times such as ``2023-11-16 18:15:46.6805900`` (ISO 8601, parsed to the nanosecond, no time
    zone) or, if the first value is a number, plain seconds (any origin). Rows need not be sorted. Errors name
    the line and the column: a missing column, a short row, an empty or unparsable value, no rows at all.
    """
    return load_timestamps_with_tokens(path)[0]


# Column names of a request's prompt and output tokens (case-insensitive): the Azure LLM inference trace's, and
# the plain spelling
PROMPT_COLUMNS: Final = ("CONTEXTTOKENS", "PROMPT_TOKENS")
OUTPUT_COLUMNS: Final = ("GENERATEDTOKENS", "OUTPUT_TOKENS")


def load_timestamps_with_tokens(
    path: PathLike,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64] | None]:
    """:func:`load_timestamps`, and each request's prompt and output tokens (``[n, 2]``, in the same sorted
    order) when the header has both a prompt column (``ContextTokens`` or ``prompt_tokens``) and an output column
    (``GeneratedTokens`` or ``output_tokens``), as the Azure LLM inference trace has; ``None`` without them.
    A token count that is not a whole number ≥ 0 is an error naming the line and the column."""
    header, rows = _csv_rows(path)
    seconds = _timestamps(path, header, rows)
    upper = [field.upper() for field in header]
    found = [next((upper.index(c) for c in names if c in upper), -1) for names in (PROMPT_COLUMNS, OUTPUT_COLUMNS)]
    order = np.argsort(seconds, kind="stable")
    relative: npt.NDArray[np.float64] = seconds[order] - seconds[order[0]]
    if min(found) < 0:
        return relative, None
    tokens = np.empty((len(rows), 2), dtype=np.int64)
    for k, col in enumerate(found):
        for i, (line_no, row) in enumerate(rows):
            value = row[col].strip() if len(row) > col else ""
            if not value.isdigit():
                raise TraceError(
                    f"{value!r} is not a token count (a whole number >= 0)", path=path, line=line_no, column=header[col]
                )
            tokens[i, k] = int(value)
    return relative, tokens[order]


def _timestamps(
    path: PathLike, header: list[str], rows: list[tuple[int, list[str]]]
) -> npt.NDArray[np.float64]:
    """The ``TIMESTAMP`` column's seconds, in file order (any origin)."""
    upper = [field.upper() for field in header]
    if "TIMESTAMP" not in upper:
        raise TraceError(
            f"no TIMESTAMP column in the header (columns: {_describe_columns(header)}); the first line must "
            "be a header naming a TIMESTAMP column of date-times or seconds",
            path=path,
            line=1,
        )
    col = upper.index("TIMESTAMP")
    name = header[col]
    values: list[str] = []
    lines: list[int] = []
    for line_no, row in rows:
        if len(row) <= col:
            raise TraceError(
                f"the row has {len(row)} field(s), so no {name} (field {col + 1})",
                path=path,
                line=line_no,
                column=name,
            )
        value = row[col].strip()
        if not value:
            raise TraceError("empty timestamp", path=path, line=line_no, column=name)
        values.append(value)
        lines.append(line_no)
    if not values:
        raise TraceError("the file has a header but no requests", path=path)
    if _is_number(values[0]):
        return _parse_seconds(values, lines, path, name)
    return _parse_datetimes(values, lines, path, name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_seconds(values: list[str], lines: list[int], path: PathLike, name: str) -> npt.NDArray[np.float64]:
    try:
        seconds = np.array(values, dtype=np.float64)
    except ValueError:
        seconds = None
    bad = (
        [i for i, v in enumerate(values) if not _is_number(v)]
        if seconds is None
        else np.flatnonzero(~np.isfinite(seconds)).tolist()
    )
    if bad:
        i = bad[0]
        raise TraceError(
            f"{values[i]!r} is not a finite number of seconds (the first row holds seconds, so all must)",
            path=path,
            line=lines[i],
            column=name,
        )
    assert seconds is not None
    return seconds


def _parse_datetimes(values: list[str], lines: list[int], path: PathLike, name: str) -> npt.NDArray[np.float64]:
    stamps: npt.NDArray[np.datetime64] | None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            stamps = np.array(values, dtype="datetime64[ns]")
        except (ValueError, Warning):
            stamps = None
        if stamps is None or np.isnat(stamps).any():
            for i, value in enumerate(values):
                try:
                    ok = not np.isnat(np.datetime64(value, "ns"))
                except (ValueError, Warning):
                    ok = False
                if not ok:
                    raise TraceError(
                        f"cannot read {value!r} as a date-time (like 2023-11-16 18:15:46.6805900) or as seconds",
                        path=path,
                        line=lines[i],
                        column=name,
                    )
    assert stamps is not None
    nanos = (stamps - stamps.min()).astype(np.int64)
    seconds: npt.NDArray[np.float64] = nanos.astype(np.float64) / 1e9
    return seconds


# ----------------------------------------------------------------------------------------------------------
# Azure Functions per-minute counts


def load_azure_functions_minutes(path: PathLike) -> npt.NDArray[np.int64]:
    """Read the Azure Functions invocation CSV and return invocations per minute summed over all functions.

    The header must hold ``minute_1`` .. ``minute_N`` (any other columns, such as ``HashFunction``, are
    ignored); the result has ``N`` entries. Each data row is one function. Errors name the line and the
    column: missing minute columns or a gap among them, a short row, an empty, non-integer or negative count.
    """
    header, rows = _csv_rows(path)
    minutes: dict[int, int] = {}
    for col, field in enumerate(header):
        match = _MINUTE_COLUMN.fullmatch(field)
        if match:
            number = int(match.group(1))
            if number in minutes:
                raise TraceError(f"column minute_{number} appears twice", path=path, line=1, column=field)
            minutes[number] = col
    if not minutes:
        raise TraceError(
            f"no minute_1..minute_N columns in the header (columns: {_describe_columns(header)})",
            path=path,
            line=1,
        )
    missing = sorted(set(range(1, max(minutes) + 1)) - minutes.keys())
    if missing:
        raise TraceError(
            f"the minute columns have a gap: no minute_{missing[0]} (expected minute_1..minute_{max(minutes)})",
            path=path,
            line=1,
        )
    columns = [minutes[m] for m in range(1, len(minutes) + 1)]
    needed = max(columns) + 1
    total = np.zeros(len(columns), dtype=np.int64)
    for line_no, row in rows:
        if len(row) < needed:
            raise TraceError(
                f"the row has {len(row)} fields, the header {len(header)}",
                path=path,
                line=line_no,
                column=header[len(row)] if len(row) < len(header) else None,
            )
        fields = [row[c] for c in columns]
        try:
            counts = np.array(fields, dtype=np.int64)
        except (ValueError, OverflowError):
            counts = None
        if counts is None or (counts < 0).any():
            _raise_bad_count(fields, columns, header, path, line_no)
        assert counts is not None
        total += counts
    if not rows:
        raise TraceError("the file has a header but no functions (data rows)", path=path)
    return total


def _raise_bad_count(fields: list[str], columns: list[int], header: list[str], path: PathLike, line_no: int) -> None:
    for field, col in zip(fields, columns, strict=True):
        try:
            value = int(field)
        except ValueError:
            what = "empty count" if not field.strip() else f"{field!r} is not a whole number of invocations"
            raise TraceError(what, path=path, line=line_no, column=header[col]) from None
        if value < 0:
            raise TraceError(f"negative invocation count {value}", path=path, line=line_no, column=header[col])
    raise TraceError("a count does not fit in a 64-bit integer", path=path, line=line_no)
