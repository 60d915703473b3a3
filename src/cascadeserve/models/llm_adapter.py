"""The LLM stage as a cascade model: :class:`LLMAdapter`, a scoring adapter that also generates.

As an :class:`~cascadeserve.models.adapters.Adapter`, ``predict(batch)`` takes a batch of **items** (see
:mod:`cascadeserve.models.llm_prompts`: one JSON string, bytes, mapping or :class:`LLMItem` per row, each a
prompt and its options, or a raw dataset row) and returns ``scores[n, max options]``: the softmax over each item's
options of their length-normalised log-likelihoods (lm-eval's "cloze" form), computed by
:meth:`LocalLLM.score` in one forward pass per batch. Items with fewer options than the batch's widest get
probability 0 in the extra columns, which changes neither the argmax nor the margin. So the prediction is the
best option's index and the profile's labels are option indices: the LLM fits today's profile format, planner
and simulator as it is, and its default certainty is the margin of the option probabilities
(``option-margin``).

:meth:`LLMAdapter.generate` answers generation items (no options) with one
:class:`~cascadeserve.models.llm.Generation` each; the profiler uses it. Served (the runtime calls the adapter),
a batch of generation items is answered with :class:`~cascadeserve.models.base.Generated`: the texts, their
token counts, and the stage's certainty in each, the generation signal named by the ``certainty`` option
(``mean-logprob`` by default; :mod:`cascadeserve.profile.llm_certainty`), through the logistic fit of a
profile's ``llm/calibration.json`` when the ``calibration`` option names that file, so that the thresholds a
plan set on the profile's (calibrated) certainty mean the same when serving; a sampled answer's certainty is the
same signal of the sampled tokens' log-probabilities under the model (before temperature, nucleus and penalties).
Each row is decoded as its item asks (cap, stop strings, sampling: :mod:`cascadeserve.models.llm_sampling`). A
batch must be all scoring or all generation items. A row with ``"echo": true`` (the OpenAI front end's ``echo``)
gets its prompt's token log-probabilities and what follows it (:mod:`cascadeserve.models.llm_echo`), and a row
whose prompt is token ids (``prompt_ids``) its answer, both with certainty 1: the one a measurement of this model,
the other readable in this stage's vocabulary only, neither one a later stage could improve on. Scoring rows that
ask for ``usage`` are answered with their token counts beside the scores.

In a models config: ``adapter: llm``, ``ref`` a ``.gguf`` file, a model directory, or a ``module:factory`` that
returns one (``cascadeserve.models.families.llm:smollm2_135m``), and ``options`` any of :class:`LocalLLM`'s
keyword arguments (``max_new_tokens``, ``chat``, ``system_prompt``, ``dtype``, ``cache``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.adapters import Adapter
from cascadeserve.models.base import Generated, ModelLoadError, TextOutput, TokenLogprobs
from cascadeserve.models.llm import Generation, LocalLLM
from cascadeserve.models.llm_echo import echo
from cascadeserve.models.llm_prompts import GENERATION_STOP, LLMItem, decode_batch
from cascadeserve.profile.llm_certainty import GENERATION_SIGNALS, generation_signals

__all__ = ["LLMAdapter", "option_probabilities"]


def _token_logprobs(
    pieces: tuple[str, ...], logprobs: tuple[float, ...], top: tuple[tuple[tuple[str, float], ...], ...]
) -> TokenLogprobs:
    """A generation's tokens as OpenAI reports them (offsets: where each token starts in the joined tokens)."""
    at, offsets = 0, []
    for p in pieces:
        offsets.append(at)
        at += len(p)
    return TokenLogprobs(pieces, logprobs, top, tuple(offsets))


def _calibration(name: str, path: Path, signal: str) -> Any:
    """The logistic fit of ``signal`` for model ``name`` in a profile's ``llm/calibration.json``."""
    from cascadeserve.profile.llm_side import read_calibration

    fits = read_calibration(path.parent.parent if path.is_file() else path).get(name, {})
    if signal not in fits:
        raise ModelLoadError(f"model {name!r}: {path} holds no calibration of {signal!r}")
    return fits[signal]


def option_probabilities(loglik: Sequence[np.ndarray], width: int | None = None) -> np.ndarray:
    """Softmax of each row's option log-likelihoods, zero-padded to ``width`` columns (default: the widest)."""
    cols = width or max(len(r) for r in loglik)
    out = np.zeros((len(loglik), cols), dtype=np.float64)
    for i, r in enumerate(loglik):
        z = np.exp(r - r.max())
        out[i, : len(r)] = z / z.sum()
    return out


class LLMAdapter(Adapter):
    """A :class:`LocalLLM` as a scoring adapter (``predict``) that can also :meth:`generate`."""

    framework = "llm"

    def __init__(
        self,
        name: str,
        path: str | Path | None = None,
        *,
        loader: Callable[[], str | Path] | None = None,
        device: str = "cpu",
        threads: int | None = None,
        stop: Sequence[str] = GENERATION_STOP,
        **options: Any,
    ) -> None:
        super().__init__(name)
        if path is None and loader is None:
            raise ModelLoadError(f"model {name!r}: give the model's path or a loader that returns it")
        self._path = None if path is None else Path(path)
        self._loader = loader
        self.device = device
        self.threads = threads
        self.stop = tuple(stop)
        # how a served generation batch's certainty is computed (the module docstring); not LocalLLM's business
        self.signal = str(options.pop("certainty", "mean-logprob"))
        if self.signal not in GENERATION_SIGNALS:
            raise ModelLoadError(
                f"model {name!r}: certainty {self.signal!r} is not a generation signal "
                f"({', '.join(GENERATION_SIGNALS)})"
            )
        cal = options.pop("calibration", None)
        self.calibration = None if cal is None else _calibration(name, Path(cal), self.signal)
        self.options = options
        self.llm: LocalLLM | None = None
        if path is not None:
            self.llm = LocalLLM(name, path, device=device, threads=threads, **options)

    def _load(self) -> None:
        if self.llm is None:
            assert self._loader is not None
            self.llm = LocalLLM(
                self.name, Path(self._loader()), device=self.device, threads=self.threads, **self.options
            )
        self.llm.threads = self.threads
        self.llm.load()

    @property
    def model(self) -> LocalLLM:
        """The loaded LLM."""
        self.load()
        assert self.llm is not None
        return self.llm

    @property
    def device_used(self) -> str:
        """Where the model runs: its ``device``, or the CPU when CUDA was asked for and is not there."""
        return self.llm.device_used if self.llm is not None and self.llm.model is not None else self.device

    def items(self, batch: Any) -> list[LLMItem]:
        """The batch's rows as items; a malformed row is a ``ValueError`` naming its index."""
        return decode_batch(self.name, batch)

    def loglik(self, batch: Any) -> list[np.ndarray]:
        """Each scoring item's option log-likelihoods (length-normalised)."""
        items = self.items(batch)
        bad = next((i for i, it in enumerate(items) if it.options is None), None)
        if bad is not None:
            raise ValueError(f"model {self.name!r}: row {bad} has no options; a generation item cannot be scored")
        return self.model.score([it.prompt for it in items], [it.options or () for it in items])

    def _run(self, x: Any) -> Any:
        return option_probabilities(self.loglik(x))

    def generate(self, batch: Any, *, max_new_tokens: int | None = None) -> list[Generation]:
        """One greedy answer per item (the items' options, if any, are ignored), stopped at ``stop`` strings."""
        items = self.items(batch)
        return self.model.generate(items, max_new_tokens=max_new_tokens, stop=self.stop)

    def __call__(self, batch: Any) -> np.ndarray | Generated:  # type: ignore[override]
        """Served: option probabilities for a batch of scoring items, :class:`Generated` answers for generation
        items (the runtime's devices call this)."""
        items = self.items(batch)
        if any(it.echo for it in items):
            return self._with_echo(items)
        if all(it.options is None for it in items):
            return self.answer(items)
        if any(it.usage for it in items):
            return self._scored(items)
        return self.predict(batch)

    def _scored(self, items: Sequence[LLMItem]) -> Generated:
        """Scoring items answered with what each cost: the option chosen, the tokens read (the prompt and every
        option, as scored) and none generated."""
        if any(it.options is None for it in items):
            raise ValueError(f"model {self.name!r}: a generation item cannot share a batch with scoring items")
        llm = self.model
        probs = option_probabilities(llm.score([it.prompt for it in items], [it.options or () for it in items]))
        outs = []
        for it, row in zip(items, probs, strict=True):
            opts = it.options or ()
            read = sum(llm.token_counts(it.prompt, opts))
            outs.append(TextOutput(opts[int(row.argmax())], read, 0, None, "stop"))
        return Generated(tuple(outs), np.zeros(len(items)), probs)

    def _with_echo(self, items: Sequence[LLMItem]) -> Generated:
        """A batch with echo rows: each echo row gets its prompt's token log-probabilities and what follows it
        (:mod:`cascadeserve.models.llm_echo`), with certainty 1 (a measurement of this model, which no later stage
        could improve on); the other rows their generated answers."""
        rest = [it for it in items if not it.echo]
        if any(it.options is not None for it in rest):
            raise ValueError(f"model {self.name!r}: echo rows cannot share a batch with scoring items")
        echoed = iter(echo(self.model, [it for it in items if it.echo], self.stop))
        gen = self.answer(rest) if rest else Generated((), np.zeros(0))
        answers = iter(zip(gen.outputs, gen.certainties.tolist(), strict=True))
        outs: list[TextOutput] = []
        certs: list[float] = []
        for it in items:
            out, cert = (next(echoed), 1.0) if it.echo else next(answers)
            outs.append(out)
            certs.append(cert)
        return Generated(tuple(outs), np.asarray(certs, dtype=np.float64))

    def answer(self, items: Sequence[LLMItem], max_new_tokens: int | None = None) -> Generated:
        """Generated answers to generation items, with the stage's certainty in each: the ``certainty`` signal of
        the answer's tokens' log-probabilities under the model (sampled or not, see
        :mod:`cascadeserve.models.llm_sampling`), through the calibration when given. ``max_new_tokens`` sets the
        default cap (the stage's own when None); an item's own cap replaces it. A prompt in token ids can only be
        read by this stage's vocabulary: it is answered here, with certainty 1."""
        gens = self.model.generate(items, max_new_tokens=max_new_tokens, stop=self.stop)
        signal = generation_signals([g.token_logprobs for g in gens], [g.first_token_margin for g in gens])
        certs = signal[self.signal]
        if self.calibration is not None:
            certs = self.calibration(certs)
        certs = np.where([it.first_stage_only for it in items], 1.0, certs)
        outs = tuple(
            TextOutput(
                g.text,
                g.prompt_tokens,
                g.output_tokens,
                _token_logprobs(g.tokens, g.token_logprobs, g.top),
                g.finish_reason,
            )
            for g in gens
        )
        return Generated(outs, np.clip(np.nan_to_num(certs, nan=0.0), 0.0, 1.0))

    def memory_mb(self) -> float | None:
        return None if self.llm is None else self.llm.weights_mb()
