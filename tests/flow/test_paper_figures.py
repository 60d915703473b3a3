"""The paper's Figures 1-3, run as written, with real functions in place of the models."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cascadeserve.flow import Dataflow, Table, rowID


class Pred(NamedTuple):
    label: int
    conf: float


def img_preproc(jpg_url: str) -> np.ndarray:
    """A deterministic 'image' per url: 16 pixels from the url's bytes."""
    raw = np.frombuffer(jpg_url.encode().ljust(16, b"\0")[:16], dtype=np.uint8)
    return raw.astype(np.float64) / 255.0


def _linear(seed: int):  # a fixed random linear classifier over 16 pixels, 3 classes
    w = np.random.default_rng(seed).normal(size=(16, 3))

    def predict(img: np.ndarray) -> Pred:
        z = img @ w
        p = np.exp(z - z.max())
        p /= p.sum()
        return Pred(int(p.argmax()), float(p.max()))

    return predict


resnet_101, vgg_16, inception_v3 = _linear(1), _linear(2), _linear(3)
URLS = ["s3://mybucket/cats.jpg", "s3://mybucket/dogs.jpg", "s3://mybucket/owl.jpg"]


def test_figure_1_ensemble_max_confidence_per_row() -> None:
    fl = Dataflow([("jpg_url", str)])
    img = fl.map(img_preproc)
    p1 = img.map(resnet_101)
    p2 = img.map(vgg_16)
    p3 = img.map(inception_v3)
    fl.output = p1.union(p2, p3).groupby(rowID).agg(max, "conf")
    fl.deploy()
    out = fl.execute(Table([("jpg_url", str)], URLS)).result()
    assert out.schema.names == ("conf",)
    assert [r.id for r in out] == [0, 1, 2]
    for r, url in zip(out, URLS, strict=True):
        x = img_preproc(url)
        assert r["conf"] == max(m(x).conf for m in (resnet_101, vgg_16, inception_v3))
    fl.close()


LABELS = ["cat", "dog", "owl"]


def resnet(img: np.ndarray) -> Pred:
    return resnet_101(img)


def convert_to_label(label: int, conf: float) -> str:
    return LABELS[label]


def test_figure_2_a_chain_executed_once() -> None:
    fl = Dataflow([("jpg_url", str)])
    img = fl.map(img_preproc)
    pred = img.map(resnet)
    label = pred.map(convert_to_label)
    fl.output = label
    fl.deploy()

    input_tbl = Table([("jpg_url", str)], ["s3://mybucket/cats.jpg", "s3://mybucket/dogs.jpg"])
    out = fl.execute(input_tbl)
    res = out.result()
    assert res.schema.names == ("convert_to_label",)
    assert [r[0] for r in res] == [LABELS[resnet(img_preproc(u)).label] for u in URLS[:2]]
    fl.close()


class Scored(NamedTuple):
    img: np.ndarray
    label: int
    conf: float


def preproc(jpg_url: str) -> np.ndarray:
    return img_preproc(jpg_url)


def simple_model(img: np.ndarray) -> Scored:
    p = vgg_16(img)
    return Scored(img, p.label, p.conf)


def low_confidence(img: np.ndarray, label: int, conf: float) -> bool:
    return conf < 0.6


def complex_model(img: np.ndarray, label: int, conf: float) -> Pred:
    return resnet_101(img)


def max_conf(img: np.ndarray, label: int, conf: float, label_right: int | None, conf_right: float | None) -> Pred:
    if conf_right is not None and label_right is not None and conf_right > conf:
        return Pred(label_right, conf_right)
    return Pred(label, conf)


def test_figure_3_a_two_model_cascade() -> None:
    flow = Dataflow([("jpg_url", str)])
    img = flow.map(preproc)
    simple = img.map(simple_model)
    complex = simple.filter(low_confidence).map(complex_model)

    flow.output = simple.join(complex, how="left").map(max_conf)
    flow.deploy()
    urls = [*URLS, "s3://x/1.jpg", "s3://y/22.jpg", "s3://z/333.jpg"]
    out = flow.execute(Table([("jpg_url", str)], urls)).result()
    expect = []
    for u in urls:
        x = preproc(u)
        s = simple_model(x)
        c = complex_model(x, s.label, s.conf) if s.conf < 0.6 else None
        expect.append(max_conf(x, s.label, s.conf, c and c.label, c and c.conf))
    assert [tuple(r) for r in out] == [tuple(e) for e in expect]
    assert any(vgg_16(preproc(u)).conf < 0.6 for u in urls) and any(vgg_16(preproc(u)).conf >= 0.6 for u in urls)
    flow.close()
