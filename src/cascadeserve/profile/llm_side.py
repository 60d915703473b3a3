"""The LLM side files of a profile: every certainty signal, token counts, generated texts, costs, calibration.

They sit in ``PROFILE_DIR/llm/`` beside the interchange format, which they leave unchanged (``profile.yaml``,
``labels.csv`` and ``predictions/`` still hold each model's prediction and chosen certainty, so the frontier,
the planner and the simulator read an LLM profile as any other). Each file is optional: a profile without them
loads as before, and a reader returns ``None`` or an empty mapping::

    llm/signals/<model>.csv     sample_id,correct,<signal>,...      every certainty signal, each in [0, 1]
    llm/tokens/<model>.csv      sample_id,prompt_tokens,output_tokens,scored_tokens
    llm/outputs/<model>.jsonl   {"sample_id", "text", "correct"} per generated answer (generation sets)
    llm/costs.json              {model: {task, prefill_ms_per_token: {batch: ms}, decode_ms_per_step: {batch: ms},
                                         fixed_ms: {batch: ms} (optional),
                                         weights_mb, kv_cache_mb_per_token, prompt_tokens, decode_steps,
                                         mean_prompt_tokens, mean_output_tokens}}
    llm/calibration.json        {model: {signal: {a, b, n}}}   logistic fits (profile.llm_certainty)

``prompt_tokens`` counts the prompt after the chat template; ``output_tokens`` the decode steps of a generated
answer (the stop token included; 0 for scoring); ``scored_tokens`` the options' tokens that scoring ran through
the model (0 for generation). The cost model: a batch of ``b`` prompts whose longest has ``P`` tokens and whose
longest answer ``D`` takes about ``fixed_ms[b] + P·prefill_ms_per_token[b] + D·decode_ms_per_step[b]``;
memory = ``weights_mb`` + ``kv_cache_mb_per_token`` per token held (prompt and output, per sequence). Errors name
the file and line.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.errors import ProfileError
from cascadeserve.profile.llm_certainty import LogisticCalibration, auroc

__all__ = [
    "LLMCosts",
    "LLMTokens",
    "read_calibration",
    "read_costs",
    "read_signals",
    "read_tokens",
    "signal_report",
    "tokens_path",
    "write_calibration",
    "write_costs",
    "write_outputs",
    "write_signals",
    "write_tokens",
]

LLM_DIR = "llm"


@dataclass(frozen=True)
class LLMCosts:
    """A model's measured token costs (see the module docstring)."""

    task: str
    prefill_ms_per_token: dict[int, float]
    decode_ms_per_step: dict[int, float]
    weights_mb: float
    kv_cache_mb_per_token: float
    prompt_tokens: int  # the prompt length the cost model was timed at
    decode_steps: int
    mean_prompt_tokens: float
    mean_output_tokens: float
    # the part of a batch's time that no token pays for (weights streamed, kernels launched, the scoring path's own
    # work), per batch size: fitted on random real batches; empty in profiles measured before it was
    fixed_ms: dict[int, float] = field(default_factory=dict)

    def batch_ms(self, batch: int, prompt_tokens: float, output_tokens: float) -> float:
        """Estimated ms of a batch of ``batch`` prompts whose longest has ``prompt_tokens`` tokens and longest
        answer ``output_tokens`` steps (linear in the batch size between measured ones)."""
        fixed = _interp(self.fixed_ms, batch) if self.fixed_ms else 0.0
        return (
            fixed
            + prompt_tokens * _interp(self.prefill_ms_per_token, batch)
            + output_tokens * _interp(self.decode_ms_per_step, batch)
        )


def _interp(curve: Mapping[int, float], b: float) -> float:
    xs = sorted(curve)
    return float(np.interp(b, xs, [curve[x] for x in xs]))


@dataclass(frozen=True)
class LLMTokens:
    sample_ids: tuple[str, ...]
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    scored_tokens: np.ndarray


def _dir(profile_dir: str | Path, *parts: str) -> Path:
    return Path(profile_dir).joinpath(LLM_DIR, *parts)


def _write_csv(path: Path, header: Sequence[str], rows: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]] | None:
    if not path.is_file():
        return None
    reader = csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline=""))
    header = [c.strip() for c in next(reader, [])]
    rows = []
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise ProfileError(f"expected {len(header)} fields, got {len(row)}", path=path, line=reader.line_num)
        rows.append((reader.line_num, row))
    return header, rows


def _float(path: Path, line: int, column: str, text: str, *, unit: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or (unit and v > 1):
        want = "a number in [0, 1]" if unit else "a non-negative number"
        raise ProfileError(f"expected {want}, got {text!r}", path=path, line=line, column=column)
    return v


def write_signals(
    profile_dir: str | Path, model: str, sample_ids: Sequence[Any], correct: np.ndarray, signals: Mapping[str, Any]
) -> Path:
    path = _dir(profile_dir, "signals", f"{model}.csv")
    names = list(signals)
    cols = [np.asarray(signals[n], dtype=np.float64) for n in names]
    rows = (
        [str(s), int(c), *(repr(float(col[i])) for col in cols)]
        for i, (s, c) in enumerate(zip(sample_ids, np.asarray(correct, dtype=bool), strict=True))
    )
    _write_csv(path, ["sample_id", "correct", *names], rows)
    return path


def read_signals(profile_dir: str | Path, model: str) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]] | None:
    """(sample ids, correct [n] bool, {signal: [n]}), or None when the profile has no signals for ``model``."""
    path = _dir(profile_dir, "signals", f"{model}.csv")
    got = _read_csv(path)
    if got is None:
        return None
    header, rows = got
    if header[:2] != ["sample_id", "correct"] or len(header) < 3:
        raise ProfileError(f"header must be sample_id,correct,<signal>,..., got {','.join(header)}", path=path, line=1)
    ids = [r[0].strip() for _, r in rows]
    correct = np.asarray([_float(path, ln, "correct", r[1], unit=True) for ln, r in rows]) > 0.5
    signals = {
        name: np.asarray([_float(path, ln, name, r[k], unit=True) for ln, r in rows])
        for k, name in enumerate(header[2:], start=2)
    }
    return ids, correct, signals


def write_tokens(
    profile_dir: str | Path,
    model: str,
    sample_ids: Sequence[Any],
    prompt_tokens: Sequence[int],
    output_tokens: Sequence[int],
    scored_tokens: Sequence[int],
) -> Path:
    path = tokens_path(profile_dir, model)
    rows = zip([str(s) for s in sample_ids], prompt_tokens, output_tokens, scored_tokens, strict=True)
    _write_csv(path, ["sample_id", "prompt_tokens", "output_tokens", "scored_tokens"], rows)
    return path


def tokens_path(profile_dir: str | Path, model: str) -> Path:
    return _dir(profile_dir, "tokens", f"{model}.csv")


def read_tokens(profile_dir: str | Path, model: str) -> LLMTokens | None:
    path = tokens_path(profile_dir, model)
    got = _read_csv(path)
    if got is None:
        return None
    header, rows = got
    want = ["sample_id", "prompt_tokens", "output_tokens", "scored_tokens"]
    if header != want:
        raise ProfileError(f"header must be {','.join(want)}, got {','.join(header)}", path=path, line=1)

    def col(k: int) -> np.ndarray:
        return np.asarray([int(_float(path, ln, header[k], r[k])) for ln, r in rows], dtype=np.int64)

    return LLMTokens(tuple(r[0].strip() for _, r in rows), col(1), col(2), col(3))


def write_outputs(
    profile_dir: str | Path, model: str, sample_ids: Sequence[Any], texts: Sequence[str], correct: Sequence[bool]
) -> Path:
    path = _dir(profile_dir, "outputs", f"{model}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for sid, text, ok in zip(sample_ids, texts, correct, strict=True):
            f.write(json.dumps({"sample_id": str(sid), "text": text, "correct": bool(ok)}, ensure_ascii=False) + "\n")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ProfileError(f"invalid JSON: {e}", path=path) from None
    if not isinstance(doc, dict):
        raise ProfileError("expected a JSON object keyed by model name", path=path)
    return doc


def _merge_json(path: Path, model: str, entry: Any) -> Path:
    doc = _read_json(path)
    doc[model] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
    return path


def write_costs(profile_dir: str | Path, model: str, costs: LLMCosts) -> Path:
    entry = asdict(costs)
    for key in ("prefill_ms_per_token", "decode_ms_per_step", "fixed_ms"):
        entry[key] = {str(b): v for b, v in sorted(entry[key].items())}
    if not entry["fixed_ms"]:
        del entry["fixed_ms"]
    return _merge_json(_dir(profile_dir, "costs.json"), model, entry)


def read_costs(profile_dir: str | Path) -> dict[str, LLMCosts]:
    path = _dir(profile_dir, "costs.json")
    out: dict[str, LLMCosts] = {}
    for model, e in _read_json(path).items():
        try:
            out[model] = LLMCosts(
                task=str(e["task"]),
                prefill_ms_per_token={int(b): float(v) for b, v in e["prefill_ms_per_token"].items()},
                decode_ms_per_step={int(b): float(v) for b, v in e["decode_ms_per_step"].items()},
                weights_mb=float(e["weights_mb"]),
                kv_cache_mb_per_token=float(e["kv_cache_mb_per_token"]),
                prompt_tokens=int(e["prompt_tokens"]),
                decode_steps=int(e["decode_steps"]),
                mean_prompt_tokens=float(e["mean_prompt_tokens"]),
                mean_output_tokens=float(e["mean_output_tokens"]),
                fixed_ms={int(b): float(v) for b, v in e.get("fixed_ms", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ProfileError(f"model {model!r}: bad cost entry ({type(err).__name__}: {err})", path=path) from None
    return out


def write_calibration(profile_dir: str | Path, model: str, fits: Mapping[str, LogisticCalibration]) -> Path:
    return _merge_json(_dir(profile_dir, "calibration.json"), model, {s: f.to_json() for s, f in fits.items()})


def read_calibration(profile_dir: str | Path) -> dict[str, dict[str, LogisticCalibration]]:
    path = _dir(profile_dir, "calibration.json")
    out: dict[str, dict[str, LogisticCalibration]] = {}
    for model, fits in _read_json(path).items():
        try:
            out[model] = {s: LogisticCalibration.from_json(f) for s, f in fits.items()}
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ProfileError(f"model {model!r}: bad calibration ({type(err).__name__}: {err})", path=path) from None
    return out


def signal_report(profile_dir: str | Path, models: Sequence[str]) -> list[dict[str, Any]]:
    """Per model and signal: accuracy, samples and the signal's AUROC for "the stage is right"."""
    rows: list[dict[str, Any]] = []
    for model in models:
        got = read_signals(profile_dir, model)
        if got is None:
            continue
        _, correct, signals = got
        for name, values in signals.items():
            rows.append(
                {
                    "model": model,
                    "signal": name,
                    "accuracy": float(correct.mean()),
                    "samples": len(correct),
                    "auroc": auroc(values, correct),
                }
            )
    return rows
