"""The model protocol every adapter implements, and the errors a user sees when a model cannot be used.

A model, to cascadeserve, is two calls: :meth:`Model.load` (once, before serving or profiling: read weights,
build sessions, set thread counts) and :meth:`Model.predict` (``scores[n, classes]`` for a batch of ``n``
inputs). Certainty is *not* the model's business: the profile's certainty function (margin by default) turns
scores into certainty, the same way in the profiler and in the runtime.

Heavy frameworks (torch, onnxruntime, transformers) are optional extras. :func:`require` imports one lazily
and, when it is missing, raises :class:`MissingExtraError` naming the ``pip install`` line that fixes it.
:func:`reads` declares the files a model factory loads, so that ``up`` knows when a retrained model's profile is
stale.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from cascadeserve.errors import CascadeServeError

__all__ = [
    "EXTRAS",
    "Generated",
    "MissingExtraError",
    "Model",
    "ModelLoadError",
    "TextOutput",
    "TokenLogprobs",
    "batch_rows",
    "reads",
    "require",
]

# module -> the extra that installs it
EXTRAS: dict[str, str] = {
    "torch": "torch",
    "onnxruntime": "onnx",
    "onnx": "onnx",
    "transformers": "hf",
    "tokenizers": "text",
    "sklearn": "sklearn",
    "gguf": "llm",
    "accelerate": "llm",
}


class ModelLoadError(CascadeServeError):
    """A model could not be built, loaded or run; the message names the model and the reason."""


class MissingExtraError(ModelLoadError):
    """An optional framework is not installed; the message names the extra to install."""


def require(module: str, *, model: str | None = None) -> Any:
    """Import an optional framework, or say which extra installs it.

    Returns the module typed as ``Any``: the frameworks are untyped to mypy here, since they are optional.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        root = module.split(".")[0]
        extra = EXTRAS.get(root, root)
        who = f"model {model!r}: " if model else ""
        raise MissingExtraError(
            f"{who}{root} is not installed ({e}); install it with: pip install 'cascadeserve[{extra}]'"
        ) from None


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Per-token log-probabilities of a text, as OpenAI's completions API reports them: each token's text, its
    log-probability (``None`` where the model has no context to predict it: an echoed prompt's first token), the
    most likely alternatives at that position (``top``: (token, log-prob) pairs, best first) and the token's
    character offset in the text."""

    tokens: tuple[str, ...]
    logprobs: tuple[float | None, ...]
    top: tuple[tuple[tuple[str, float], ...], ...] = ()
    offsets: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TextOutput:
    """One generated answer as the runtime hands it to the front end: the text and the tokens it cost, and its
    tokens' log-probabilities where the stage reports them (what the OpenAI front end returns for ``logprobs``)."""

    text: str
    prompt_tokens: int = 0
    output_tokens: int = 0
    logprobs: TokenLogprobs | None = None
    # why the text ended, in OpenAI's words: "stop" (an end token or a stop string), "length" (a token cap cut
    # it); None where the stage does not say
    finish_reason: str | None = None


@dataclass(frozen=True)
class Generated:
    """What a generative stage returns for a batch instead of scores: one answer per row and the stage's certainty
    in each (in [0, 1], higher = surer; the cascade's thresholds apply to it as to a classifier's margin).

    A scoring stage may answer so too, to report what each answer cost: with ``scores`` (``[n, classes]``, as
    ``predict`` returns them) the labels and certainties come from the scores as for any scoring model, and
    ``outputs`` only ride along (the chosen option's text, the tokens read and scored); ``certainties`` is then
    unused."""

    outputs: tuple[TextOutput, ...]
    certainties: np.ndarray
    scores: np.ndarray | None = None


@runtime_checkable
class Model(Protocol):
    """What the profiler and the runtime need from a model."""

    name: str

    def load(self) -> None:
        """Make the model ready to predict (idempotent)."""
        ...

    def predict(self, batch: Any) -> np.ndarray:
        """Per-class scores (probabilities or logits), shape ``[len(batch), classes]``."""
        ...

    def memory_mb(self) -> float | None:
        """Memory of one replica if the adapter can tell (parameters, serialized size), else None."""
        ...


def batch_rows(batch: Any) -> int:
    """How many rows a batch holds: its length, or for a model that takes several input tensors (a mapping of each
    input's name to its rows) the length of any of them."""
    return len(next(iter(batch.values()))) if isinstance(batch, Mapping) else len(batch)


F = TypeVar("F", bound=Callable[..., Any])


def reads(files: Callable[..., Iterable[str | Path]]) -> Callable[[F], F]:
    """Declare the files a model factory reads, for ``up``'s staleness check: ``files`` takes the factory's
    ``kwargs`` and returns the paths (files or folders) it would load. A factory that finds its weights at load
    time (a cache folder, an environment variable) is otherwise invisible to the check, and a retrained model
    would keep its old profile and plan::

        @reads(lambda file, models=None: [models_dir(models) / file])
        def load(file: str, models: str | None = None) -> Any: ...
    """

    def mark(factory: F) -> F:
        factory.reads = files  # type: ignore[attr-defined]
        return factory

    return mark
