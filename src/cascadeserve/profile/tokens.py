"""Token costs: a batch of an LLM stage costs what its tokens cost, not only what its size does.

An LLM stage runs a batch as one padded tensor: every prompt is left-padded to the batch's longest, and decoding
runs until the batch's longest answer ends (or the cap). So a batch's time follows the **longest prompt** and the
**longest output** in it, and a batch of hard questions (long prompts, long answers) costs more than the profile's
mean batch of the same size. This module turns what ``profile measure`` recorded for such a stage into that rule,
written once and applied by every engine: the simulator's compiled loop, the emulated devices of the runtime
(and so the reference simulator), and the planner's capacity estimates.

What the profile holds per model (``llm/costs.json`` and ``llm/tokens/<model>.csv``,
:mod:`cascadeserve.profile.llm_side`): ``prefill_ms_per_token[b]`` and ``decode_ms_per_step[b]`` (timed at a few
batch sizes ``b`` on synthetic prompts), and per validation sample the tokens its prompt puts through the model
(the prompt plus, for scoring, the options' tokens) and the decode steps of its answer.

The rule (:func:`batch_seconds`): a batch of ``b`` requests whose longest prompt has ``P`` tokens and longest
output ``D`` steps takes ``base_s[b] + prompt_s[b]·P + output_s[b]·D`` seconds, where the tables are **anchored**
to the profile's runtime curve: over random batches of the validation set (``E[P]`` and ``E[D]``, the expected
longest prompt and output among ``b`` draws), the rule's mean equals ``runtime_ms[b]``, and the split between the
fixed, the prompt and the output part follows the measured cost model (``fixed_ms[b]``, ``prefill[b]·E[P]``,
``decode[b]·E[D]``, each over their sum). So the planner's mean costs, a calibration that scales ``runtime_ms``
and the batch overhead stay what they were; only which batch costs what changes. A model without token costs is
the same rule with its runtime as the fixed part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cascadeserve.profile.llm_side import LLMCosts
from cascadeserve.profile.runtime import RuntimeCurve

__all__ = [
    "PricedModel",
    "TokenCost",
    "TokenTables",
    "batch_seconds",
    "expected_max",
    "sample_weights",
    "token_tables",
]


@dataclass(frozen=True, eq=False)
class TokenCost:
    """One model's token data: the measured cost model and each validation sample's tokens (profile order), as
    ``llm/costs.json`` and ``llm/tokens/<model>.csv`` hold them."""

    costs: LLMCosts
    prompt_tokens: np.ndarray  # [n_samples] the prompt's tokens after the chat template
    output_tokens: np.ndarray  # [n_samples] decode steps of the answer (0 for scoring)
    scored_tokens: np.ndarray  # [n_samples] the options' tokens scoring ran through the model (0 for generation)
    # The validation set's (work, output) tokens the tables are anchored to (:meth:`shares`); None: these samples'
    # own. Requests that carry other tokens (a trace's, :meth:`replayed`) keep the set's anchor, so a long prompt
    # costs more than the set's mean batch instead of being scaled back to it.
    anchor: tuple[np.ndarray, np.ndarray] | None = None

    def __post_init__(self) -> None:
        for what, curve in (
            ("prefill_ms_per_token", self.costs.prefill_ms_per_token),
            ("decode_ms_per_step", self.costs.decode_ms_per_step),
        ):
            if not curve or any(int(b) < 1 or not np.isfinite(v) or v < 0 for b, v in curve.items()):
                raise ValueError(f"{what} needs batch sizes ≥ 1 with finite times ≥ 0")
        arrays = (self.prompt_tokens, self.output_tokens, self.scored_tokens)
        for arr in arrays:
            if arr.ndim != 1 or (len(arr) and arr.min() < 0):
                raise ValueError("token counts must be counts ≥ 0, one per sample")
        if len({len(a) for a in arrays}) != 1:
            raise ValueError("token counts differ in length")

    @property
    def work_tokens(self) -> np.ndarray:
        """Per sample, the tokens its prompt puts through the model in one pass: the prompt and the scored options."""
        return np.asarray(self.prompt_tokens + self.scored_tokens)

    def subset(self, idx: np.ndarray) -> TokenCost:
        """The same model on the samples ``idx`` (a split of the validation set)."""
        return TokenCost(
            self.costs, self.prompt_tokens[idx], self.output_tokens[idx], self.scored_tokens[idx], self.anchor
        )

    def replayed(self, samples: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> TokenCost:
        """The model answering requests that take the validation samples ``samples`` but carry their own prompt and
        output tokens (a trace's): each priced by those (a scoring stage decodes nothing, whatever the output),
        the tables still anchored on the validation set."""
        idx = np.asarray(samples, dtype=np.int64)
        decodes = bool(self.output_tokens.max(initial=0) > 0)
        out = np.asarray(output, dtype=np.int64) if decodes else np.zeros(len(idx), dtype=np.int64)
        anchor = self.anchor if self.anchor is not None else (self.work_tokens, self.output_tokens)
        return TokenCost(self.costs, np.asarray(prompt, dtype=np.int64), out, self.scored_tokens[idx], anchor)

    def shares(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per batch size, over random batches: the fixed, prompt and output shares of a batch's mean time (they
        sum to 1), E[longest prompt] and E[longest output]."""
        work, output = self.anchor if self.anchor is not None else (self.work_tokens, self.output_tokens)
        ep = expected_max(work, sizes)
        ed = expected_max(output, sizes)
        c = self.costs
        fixed = _interp(c.fixed_ms, sizes) if c.fixed_ms else np.zeros(len(sizes))
        tp = _interp(c.prefill_ms_per_token, sizes) * ep
        td = _interp(c.decode_ms_per_step, sizes) * ed
        total = fixed + tp + td
        ok = total > 0
        # nothing measured (every part priced 0): a token of either kind costs the same, nothing is fixed
        even = np.where(ep + ed > 0, ep / np.where(ep + ed > 0, ep + ed, 1.0), 1.0)
        div = np.where(ok, total, 1.0)
        sf = np.where(ok, fixed / div, 0.0)
        sp = np.where(ok, tp / div, even)
        return sf, sp, 1.0 - sf - sp, ep, ed


class PricedModel(Protocol):
    """What the rule reads of a :class:`~cascadeserve.profile.ModelProfile` (a protocol: that module imports this)."""

    @property
    def runtime(self) -> RuntimeCurve: ...

    @property
    def tokens(self) -> TokenCost | None: ...


def _interp(curve: Mapping[int, float], b: np.ndarray) -> np.ndarray:
    xs = sorted(curve)
    return np.asarray(np.interp(b, xs, [curve[x] for x in xs]))  # flat past the measured sizes: only the split is read


def expected_max(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``E[max]`` of ``b`` draws (with replacement) from ``values``, for each ``b`` in ``sizes`` (exact: over the
    distinct values ``u_j`` with empirical CDF ``F_j``, ``E = Σ u_j (F_j^b − F_{j−1}^b)``)."""
    v = np.asarray(values, dtype=np.float64)
    b = np.asarray(sizes, dtype=np.float64)
    if not len(v):
        return np.zeros(len(b))
    u, counts = np.unique(v, return_counts=True)
    cdf = np.cumsum(counts) / len(v)
    prev = np.concatenate([[0.0], cdf[:-1]])
    out = np.empty(len(b))
    for k in range(0, len(b), 512):  # [values, sizes] in chunks: a few hundred distinct counts × 512 sizes
        bb = b[k : k + 512][None, :]
        out[k : k + 512] = (u[:, None] * (cdf[:, None] ** bb - prev[:, None] ** bb)).sum(axis=0)
    return out


@dataclass(frozen=True, eq=False)
class TokenTables:
    """The rule's arrays for a whole profile: ``[model row, batch size]`` seconds (fixed, and per token of the
    longest prompt and output), ``[model row, sample]`` tokens. A row without token costs has its runtime as the
    fixed part and no per-token price."""

    base_s: np.ndarray
    prompt_s: np.ndarray
    output_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def seconds(self, row: int, samples: np.ndarray) -> float:
        """Seconds of a batch of the validation samples ``samples`` on model row ``row`` (the table must hold
        ``len(samples)``)."""
        n = len(samples)
        return batch_seconds(
            float(self.base_s[row, n]),
            float(self.prompt_s[row, n]),
            float(self.output_s[row, n]),
            float(self.prompt_tokens[row, samples].max()) if n else 0.0,
            float(self.output_tokens[row, samples].max()) if n else 0.0,
        )


def batch_seconds(base_s: float, prompt_s: float, output_s: float, prompt_max: float, output_max: float) -> float:
    """The rule: a batch's seconds from its longest prompt and longest output (plain numbers, so the compiled
    simulator loop runs this very function, compiled)."""
    return base_s + prompt_s * prompt_max + output_s * output_max


def token_tables(models: Sequence[PricedModel], n_samples: int, size: int) -> TokenTables | None:
    """The tables for batch sizes ``0..size``, or None when no model has token costs (the plain runtime table is
    then the whole rule)."""
    if not any(_priced(m) for m in models):
        return None
    sizes = np.arange(size + 1, dtype=np.float64)
    base_s = np.zeros((len(models), size + 1))
    prompt_s = np.zeros((len(models), size + 1))
    output_s = np.zeros((len(models), size + 1))
    p_tok = np.zeros((len(models), n_samples))
    d_tok = np.zeros((len(models), n_samples))
    for r, m in enumerate(models):
        rt = np.asarray(m.runtime.table(size), dtype=np.float64)  # seconds; entry 0 is 0
        tc = m.tokens
        if tc is None or not _priced(m):
            base_s[r] = rt
            continue
        sf, sp, sd, ep, ed = tc.shares(sizes)
        base_s[r] = rt * sf
        prompt_s[r] = np.where(ep > 0, rt * sp / np.where(ep > 0, ep, 1.0), 0.0)
        output_s[r] = np.where(ed > 0, rt * sd / np.where(ed > 0, ed, 1.0), 0.0)
        p_tok[r] = tc.work_tokens
        d_tok[r] = tc.output_tokens
    return TokenTables(base_s, prompt_s, output_s, p_tok, d_tok)


def _priced(m: PricedModel) -> bool:
    """Whether ``m``'s batches are priced by their tokens: it has token counts, not all zero (with none, a batch
    would cost nothing; it keeps its runtime curve instead)."""
    tc = m.tokens
    return tc is not None and bool(tc.work_tokens.max(initial=0) > 0 or tc.output_tokens.max(initial=0) > 0)


def sample_weights(model: PricedModel) -> np.ndarray | None:
    """Each validation sample's cost on ``model`` relative to the mean (mean 1), at batch 1 where a request's
    tokens are the batch's: what the planner charges a request that reaches this stage. None without tokens."""
    tc = model.tokens
    if tc is None or not _priced(model):
        return None
    sf, sp, sd, ep, ed = (float(x[0]) for x in tc.shares(np.ones(1)))
    w = np.full(len(tc.prompt_tokens), sf)
    if ep > 0:
        w += sp * tc.work_tokens / ep
    if ed > 0:
        w += sd * tc.output_tokens / ed
    return w
