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
:class:`~cascadeserve.models.llm.Generation` each; the OpenAI-style front end and the profiler use it.

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
from cascadeserve.models.base import ModelLoadError
from cascadeserve.models.llm import Generation, LocalLLM
from cascadeserve.models.llm_prompts import GENERATION_STOP, LLMItem, decode_item

__all__ = ["LLMAdapter", "option_probabilities"]


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
        out: list[LLMItem] = []
        for i, raw in enumerate(batch):
            try:
                out.append(decode_item(raw))
            except ValueError as e:
                raise ValueError(f"model {self.name!r}: row {i}: {e}") from None
        return out

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
        return self.model.generate([it.prompt for it in items], max_new_tokens=max_new_tokens, stop=self.stop)

    def memory_mb(self) -> float | None:
        return None if self.llm is None else self.llm.weights_mb()
