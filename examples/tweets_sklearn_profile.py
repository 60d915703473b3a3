"""Build a small real model family on TweetEval sentiment with scikit-learn, measure it, and write a profile.

Three models of rising cost: multinomial naive Bayes on word counts, logistic regression on word 1-2-gram
TF-IDF, and logistic regression on word + character n-gram TF-IDF. (An MLP on the same features trained for 4
minutes and was less accurate than the last one, so it is not part of the family.)
They are trained on TweetEval's test split (12,284 tweets) and profiled on its validation split (2,000 tweets):
predictions, margin certainty, and the median wall time of ``predict_proba`` on raw text per batch size (text
vectorisation included, since a served model pays for it), with one thread.

Usage: python examples/tweets_sklearn_profile.py [--data ../shared/data/datasets/tweeteval_sentiment]
                                                  [--out tests/data/profiles/tweets-sklearn]

TweetEval: Barbieri et al., "TweetEval: Unified Benchmark and Comparative Evaluation for Tweet Classification",
Findings of EMNLP 2020. Only derived records (predictions, certainties) are written, never the tweets.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import FeatureUnion, make_pipeline

from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, save_profile

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def read_split(d: Path, split: str) -> tuple[list[str], np.ndarray]:
    text = (d / f"{split}_text.txt").read_text(encoding="utf-8").splitlines()
    labels = np.array([int(x) for x in (d / f"{split}_labels.txt").read_text().split()], dtype=np.int64)
    assert len(text) == len(labels), split
    return text, labels


def features() -> FeatureUnion:
    return FeatureUnion(
        [
            ("w", TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)),
            ("c", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=3, sublinear_tf=True)),
        ]
    )


def family(seed: int) -> dict[str, object]:
    return {
        "nb-words": make_pipeline(CountVectorizer(min_df=2), MultinomialNB()),
        "lr-words": make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True), LogisticRegression(max_iter=2000, C=2.0)
        ),
        "lr-chars": make_pipeline(features(), LogisticRegression(max_iter=2000, C=2.0)),
    }


def time_batches(model: object, texts: list[str], repeats: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for b in BATCH_SIZES:
        batch = texts[:b]
        model.predict_proba(batch)  # type: ignore[attr-defined]  # warm-up
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.predict_proba(batch)  # type: ignore[attr-defined]
            samples.append((time.perf_counter() - t0) * 1000.0)
        out[b] = float(np.median(samples))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/datasets/tweeteval_sentiment"))
    ap.add_argument("--out", type=Path, default=Path("tests/data/profiles/tweets-sklearn"))
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    train_x, train_y = read_split(args.data, "test")
    val_x, val_y = read_split(args.data, "val")
    models, scores = [], {}
    for name, model in family(args.seed).items():
        t0 = time.perf_counter()
        model.fit(train_x, train_y)  # type: ignore[attr-defined]
        fit_s = time.perf_counter() - t0
        scores[name] = model.predict_proba(val_x)  # type: ignore[attr-defined]
        runtime = time_batches(model, val_x, args.repeats)
        memory_mb = len(pickle.dumps(model)) / 1e6
        acc = float((scores[name].argmax(axis=1) == val_y).mean())
        print(f"{name}: fit {fit_s:.1f}s acc {acc:.4f} b1 {runtime[1]:.3f}ms b64 {runtime[64]:.3f}ms")
        models.append(ModelProfile(name, round(memory_mb, 3), RuntimeCurve.from_mapping(runtime)))
    prof = Profile.from_scores(
        "tweets-sklearn",
        models,
        val_y,
        scores,
        device=f"cpu, 1 thread, {platform.processor() or platform.machine()}",
        source="examples/tweets_sklearn_profile.py on TweetEval sentiment (train: test split, validation: val split)",
    )
    save_profile(prof, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
