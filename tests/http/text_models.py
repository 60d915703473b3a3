"""Small real text models for the V2 text tests, trained in seconds on the TweetEval sentiment data.

The tweets family (:mod:`cascadeserve.models.families.tweets`) trains its heads on 6,000 tweets through two
transformer encoders, which takes tens of minutes on a 2-core machine; these factories keep its real parts (the
TF-IDF + logistic-regression pipeline, the paraphrase-MiniLM-L3 ONNX encoder and its tokenizer) but fit on a few
hundred tweets, so a test can serve raw text end to end within seconds.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["l3_head", "tfidf_lr", "train_texts"]

N_TFIDF = 2000
N_L3 = 200


def _dir() -> Path:
    return Path(os.environ.get("CASCADESERVE_TWEETEVAL", "../shared/data/datasets/tweeteval_sentiment"))


@cache
def train_texts() -> tuple[list[str], np.ndarray]:
    d = _dir()
    text = (d / "test_text.txt").read_text(encoding="utf-8").splitlines()
    labels = np.asarray([int(x) for x in (d / "test_labels.txt").read_text(encoding="utf-8").split()])
    return text, labels


@cache
def tfidf_lr() -> Any:
    """Factory (sklearn adapter): TF-IDF + logistic regression on the first tweets of the test split."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    x, y = train_texts()
    return make_pipeline(TfidfVectorizer(min_df=2), LogisticRegression(max_iter=500)).fit(x[:N_TFIDF], y[:N_TFIDF])


@cache
def _l3_head() -> Any:
    import onnxruntime as ort
    from sklearn.linear_model import LogisticRegression

    from cascadeserve.models.families.tweets import l3_path, tokenize

    x, y = train_texts()
    sess = ort.InferenceSession(str(l3_path()), providers=["CPUExecutionProvider"])
    emb = np.concatenate([sess.run(["461"], tokenize(x[i : i + 50]))[0] for i in range(0, N_L3, 50)])
    return LogisticRegression(max_iter=1000).fit(emb, y[:N_L3])


def l3_head(embeddings: np.ndarray) -> np.ndarray:
    """Postprocess (onnx adapter): sentence embeddings -> class probabilities."""
    return np.asarray(_l3_head().predict_proba(np.asarray(embeddings)))
