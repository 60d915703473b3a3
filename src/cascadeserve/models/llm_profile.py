"""Profiling one LLM stage: predictions, every certainty signal, token counts, and a per-token cost model.

The profiler (:mod:`cascadeserve.models.profiler`) hands every :class:`LLMAdapter` here, with a labelled LLM set
(:func:`cascadeserve.models.llm_prompts.load_jsonl`). What comes back fills the profile's usual files, and the
LLM side files (:mod:`cascadeserve.profile.llm_side`) are written on the way:

* **scoring sets** (multiple choice, yes/no, sentiment): the prediction is the best option's index and the label
  the right one's, exactly today's format; the certainty column is ``option-margin`` unless the config names
  another scoring signal.
* **generation sets** (NQ-open): every label is 1 and the prediction is 1 when the answer is right (normalised
  exact match), else 0, so the interchange format stays valid and a cascade's accuracy is the fraction answered
  right; the texts go to ``llm/outputs/<model>.jsonl``. The certainty column is ``mean-logprob`` unless the
  config names another generation signal.
* a certainty name prefixed ``calibrated-`` (``calibrated-mean-logprob``) uses that signal's logistic fit on this
  validation set (in-sample: the planner then reads thresholds as probabilities of being right).

An upstream stage (:class:`~cascadeserve.models.upstream.UpstreamAdapter`, an OpenAI-compatible server) is
measured the same way through its requests: predictions, every signal, the token counts its server reports for
generation (none for scoring: there is no local tokenizer), and ``runtime_ms`` per batch size, the time a batch's
requests take at the stage's ``max_concurrency`` (its capacity curve); it has no local token cost model
(``llm/costs.json`` holds none for it) and no memory on this machine's devices.

Costs: ``runtime_ms`` per batch size is the mean time of the stage's real work (``predict`` for scoring,
``generate`` up to the cap for generation) on batches drawn at random from the set (at least ``MIN_DRAWS``): a
batch's time follows its longest prompt, so the first ``b`` items would describe their own prompts only. The token
cost model per batch size (:mod:`cascadeserve.profile.tokens` prices each batch with it): decode ms per step, timed
on synthetic prompts of the set's median length; ms per token of the longest prompt and the fixed ms no token pays
for, fitted by least squares on the same random batches. Memory is the weights plus the KV cache per token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.base import ModelLoadError
from cascadeserve.models.dataset import ValidationSet
from cascadeserve.models.llm_adapter import LLMAdapter, option_probabilities
from cascadeserve.models.llm_prompts import TASK_GENERATION, TASK_SCORING, decode_item, is_correct
from cascadeserve.models.timing import fit_fixed_and_slope
from cascadeserve.models.upstream import UpstreamAdapter
from cascadeserve.profile.llm_certainty import (
    GENERATION_SIGNALS,
    SCORING_SIGNALS,
    LogisticCalibration,
    generation_signals,
    scoring_signals,
)
from cascadeserve.profile.llm_side import (
    LLMCosts,
    write_calibration,
    write_costs,
    write_outputs,
    write_signals,
    write_tokens,
)

__all__ = ["DEFAULT_CERTAINTY", "LLMMeasurement", "measure_llm", "resolve_signal"]

DEFAULT_CERTAINTY = {TASK_SCORING: "option-margin", TASK_GENERATION: "mean-logprob"}
CHUNK = 8  # items per forward pass while predicting: enough to batch, small enough for Gemma's vocabulary
DECODE_STEPS = 8
# random batches timed per batch size at least: a batch's cost spreads by a third of its mean (±9 % on 16)
MIN_DRAWS = 16

Progress = Callable[[str, str, int, int], None]


@dataclass(frozen=True)
class LLMMeasurement:
    predictions: np.ndarray
    certainties: np.ndarray
    classes: int
    accuracy: float
    runtime_ms: dict[int, float]
    memory_mb: float


def resolve_signal(task: str, name: str) -> tuple[str, bool]:
    """(signal, calibrated) for a config's certainty name on a task; a name of the wrong kind (``margin`` on a
    generation set, the config default) falls back to the task's default signal."""
    calibrated = name.startswith("calibrated-")
    base = name.removeprefix("calibrated-")
    base = {"margin": "option-margin", "max-probability": "option-max-probability"}.get(base, base)
    valid = SCORING_SIGNALS if task == TASK_SCORING else GENERATION_SIGNALS
    if base not in valid:
        if base in SCORING_SIGNALS or base in GENERATION_SIGNALS or base == "negative-entropy":
            return DEFAULT_CERTAINTY[task], calibrated
        raise ModelLoadError(f"unknown LLM certainty signal {name!r}; choose one of {', '.join(valid)}")
    return base, calibrated


def _random_batches(
    run: Callable[[Any], Any],
    validation: ValidationSet,
    size: int,
    rng: np.random.Generator,
    warmup: int,
    repeats: int,
    budget_s: float,
) -> list[tuple[float, np.ndarray]]:
    """(ms, sample indices) of timed runs of ``run`` on batches of ``size`` drawn at random (seeded; without
    replacement while the set is large enough): an LLM batch's time follows its tokens, so a fixed batch would
    describe its own prompts only. At least ``MIN_DRAWS`` runs (the mean and the token fit need them; no more than
    the set holds distinct batches, and at least 3), then up to ``repeats`` while ``budget_s`` lasts."""
    n = len(validation)

    def draw() -> np.ndarray:
        return np.sort(rng.choice(n, size, replace=size > n))

    for _ in range(warmup):
        run(validation.take(draw()))
    out: list[tuple[float, np.ndarray]] = []
    start = time.perf_counter()
    least = min(MIN_DRAWS, max(3, n // size))  # no more than the set holds distinct batches (a small set's tests)
    while len(out) < max(repeats, least):
        idx = draw()
        batch = validation.take(idx)
        t0 = time.perf_counter()
        run(batch)
        out.append(((time.perf_counter() - t0) * 1000.0, idx))
        if len(out) >= least and time.perf_counter() - start > budget_s:
            break
    return out


def _whole_set_mean(
    timed_ms: float,
    size: int,
    prompt: tuple[np.ndarray, float],
    decode: tuple[np.ndarray, float],
    tokens: tuple[np.ndarray, np.ndarray],
) -> float:
    """The mean time of a random batch of ``size`` over the whole set, from the mean of the few timed ones: a batch
    costs what its longest prompt (and longest answer) costs, so the timed draws' luck in lengths is corrected by
    the fitted per-token prices and the whole set's expected longest, computed exactly enough from 4,000 seeded
    draws of token counts (no model runs). With 6 draws of a cost whose spread is about a third of its mean, the
    timed mean alone is off by ±15 %; this keeps only the error of the slope."""
    (drawn_p, per_token), (drawn_d, per_step) = prompt, decode
    all_p, all_d = tokens
    rng = np.random.default_rng(size)
    idx = rng.integers(0, len(all_p), size=(4000, size))
    gap_p = float(all_p[idx].max(axis=1).mean() - drawn_p.mean())
    gap_d = float(all_d[idx].max(axis=1).mean() - drawn_d.mean())
    return max(timed_ms + per_token * gap_p + per_step * gap_d, 1e-4)


def measure_llm(
    model: LLMAdapter | UpstreamAdapter,
    validation: ValidationSet,
    out: str | Path,
    *,
    certainty: str,
    batch_sizes: Sequence[int],
    repeats: int,
    warmup: int,
    budget_s: float,
    progress: Progress | None = None,
) -> LLMMeasurement:
    """Measure one LLM stage on a labelled LLM set and write its side files under ``out`` (see the docstring)."""
    task = validation.task
    if task not in (TASK_SCORING, TASK_GENERATION):
        raise ModelLoadError(
            f"model {model.name!r}: an llm model needs a labelled LLM set (.jsonl), got {validation.source}"
        )
    signal, calibrated = resolve_signal(task, certainty)
    name = model.name
    steps = len(batch_sizes) + 2
    model.load()
    llm = model.model if isinstance(model, LLMAdapter) else None  # None: an upstream stage, no local tokenizer
    if progress:
        progress(name, "predict", 1, steps)
    items = [decode_item(x) for x in validation.inputs]
    n = len(items)
    prompt_tokens = np.zeros(n, dtype=np.int64)
    output_tokens = np.zeros(n, dtype=np.int64)
    scored_tokens = np.zeros(n, dtype=np.int64)
    for i, it in enumerate(items):
        if llm is not None:
            prompt_tokens[i], scored_tokens[i] = llm.token_counts(it.prompt, it.options or ())
    if task == TASK_SCORING:
        width = max(len(it.options or ()) for it in items)
        scores = np.concatenate(
            [option_probabilities(model.loglik(validation.inputs[s : s + CHUNK]), width) for s in range(0, n, CHUNK)]
        )
        validation.check_classes(width, name)
        preds = np.asarray(scores.argmax(axis=1), dtype=np.int64)
        correct = preds == validation.labels
        signals = scoring_signals(scores)
        classes = width
    else:
        gens = [g for s in range(0, n, CHUNK) for g in model.generate(validation.inputs[s : s + CHUNK])]
        correct = np.asarray([is_correct(g.text, it.answers) for g, it in zip(gens, items, strict=True)])
        preds = correct.astype(np.int64)
        signals = generation_signals([g.token_logprobs for g in gens], [g.first_token_margin for g in gens])
        output_tokens[:] = [g.output_tokens for g in gens]
        if llm is None:  # what the upstream reported (its usage)
            prompt_tokens[:] = [g.prompt_tokens for g in gens]
        scored_tokens[:] = 0
        write_outputs(out, name, list(validation.sample_ids), [g.text for g in gens], list(correct))
        classes = 2
    fits = {s: LogisticCalibration.fit(v, correct) for s, v in signals.items()}
    certs = fits[signal](signals[signal]) if calibrated else signals[signal]
    ids = list(validation.sample_ids)
    write_signals(out, name, ids, correct, signals)
    write_calibration(out, name, fits)
    write_tokens(out, name, ids, prompt_tokens.tolist(), output_tokens.tolist(), scored_tokens.tolist())

    runtime: dict[int, float] = {}
    prefill: dict[int, float] = {}
    decode: dict[int, float] = {}
    fixed: dict[int, float] = {}
    typical = max(int(np.median(prompt_tokens)), 1)
    run = model.predict if task == TASK_SCORING else model.generate
    rng = np.random.default_rng(0)
    for k, b in enumerate(batch_sizes):
        if progress:
            progress(name, "time", 2 + k, steps)
        timed = _random_batches(run, validation, b, rng, warmup, repeats, budget_s)
        # random batches: a mean batch of this size. Every run counts: the slow ones are long prompts, not stalls
        # of the OS, and a queue waits on the mean (leaving the slowest of 6 out read SmolLM2's batch of 2 a
        # third cheaper than it served)
        runtime[b] = max(float(np.mean([t for t, _ in timed])), 1e-4)
        if llm is None:  # an upstream's capacity is its batch times (at its concurrency); no token cost model here
            continue
        llm.time_costs(b, typical, 1)  # warm-up at this shape
        runs = [llm.time_costs(b, typical, DECODE_STEPS) for _ in range(max(1, min(repeats, 3)))]
        decode[b] = float(np.median([r[1] for r in runs]))
        # what the batch's longest prompt costs, and what no token pays for, fitted on the same random batches
        # (decode steps priced by the synthetic run above); the synthetic prompt's cost when they cannot tell
        idx = [ix for _, ix in timed]
        longest_p = np.asarray([(prompt_tokens + scored_tokens)[ix].max() for ix in idx], dtype=np.float64)
        longest_d = np.asarray([output_tokens[ix].max() for ix in idx], dtype=np.float64)
        prompt_ms = np.asarray([t for t, _ in timed]) - decode[b] * longest_d
        fixed[b], prefill[b] = fit_fixed_and_slope(longest_p, prompt_ms, float(np.median([r[0] for r in runs])))
        runtime[b] = _whole_set_mean(runtime[b], b, (longest_p, prefill[b]), (longest_d, decode[b]),
                                     (prompt_tokens + scored_tokens, output_tokens))  # fmt: skip
    weights = 0.0 if llm is None else llm.weights_mb() or 0.0
    if llm is not None:
        write_costs(
            out,
            name,
            LLMCosts(
                task=task,
                prefill_ms_per_token=prefill,
                decode_ms_per_step=decode,
                weights_mb=round(weights, 4),
                kv_cache_mb_per_token=llm.kv_cache_mb_per_token() or 0.0,
                prompt_tokens=typical,
                decode_steps=DECODE_STEPS,
                mean_prompt_tokens=float(prompt_tokens.mean()),
                mean_output_tokens=float(output_tokens.mean()),
                fixed_ms=fixed,
            ),
        )
    if progress:
        progress(name, "done", steps, steps)
    return LLMMeasurement(
        predictions=preds,
        certainties=np.clip(np.asarray(certs, dtype=np.float64), 0.0, 1.0),
        classes=classes,
        accuracy=float(correct.mean()),
        runtime_ms=runtime,
        memory_mb=max(weights, 0.001),
    )
