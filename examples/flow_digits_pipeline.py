"""End-to-end dataflow 1: image pre-processing -> a three-model cascade -> label mapping, on the digits family.

    PYTHONPATH=src .venv/bin/python examples/flow_digits_pipeline.py [--n 200]

Requests carry a raw 8x8 image as 64 bytes (what a camera or an upload would send). The flow decodes it,
runs the cascade logreg -> cnn -> cnn-wide with the paper's cascade shape (each later model only sees the rows
the previous one is unsure of, by the same exit rule as ``cascadeserve serve``), and maps the answer to a word.
It is deployed twice: on the embedded dataflow executor, and recognised as a cascade and served with gears on
cascadeserve's runtime (``deploy(backend="gears")``); both answer every request the same way.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cascadeserve.flow import Dataflow, Table, cascade_answer, model, uncertain
from cascadeserve.flow.cascade import recognise
from cascadeserve.models import TorchAdapter
from cascadeserve.models.families import digits
from cascadeserve.plan import Device
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def decode(image: bytes) -> np.ndarray:
    """64 raw bytes (pixel values 0..16) -> the float32 pixel vector every digits model takes."""
    return np.frombuffer(image, dtype=np.uint8).astype(np.float32)


def to_word(label: int, conf: float) -> tuple[str, float]:
    return WORDS[label], conf


def build(models: list[TorchAdapter], thresholds: list[float]) -> Dataflow:
    flow = Dataflow([("image", bytes)])
    pixels = flow.map(decode, names=["pixels"])
    stages = [pixels.map(model(models[0]))]
    for m, t in zip(models[1:], thresholds, strict=True):
        stages.append(stages[-1].filter(uncertain(t)).map(model(m)))
    answer = stages[0]
    for s in stages[1:]:
        answer = answer.join(s, how="left")
    flow.output = answer.map(cascade_answer).map(to_word, names=["word", "conf"])
    return flow


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    names = ["logreg", "cnn", "cnn-wide"]
    models = [TorchAdapter(n, digits.load(n), threads=1) for n in names]  # trained once, then from the cache
    _, _, xv, yv, _ = digits.split(0)
    flow = build(models, [0.9, 0.9])
    print("recognised:", recognise(flow.graph()).cascade)
    requests = Table([("image", bytes)], [x.astype(np.uint8).tobytes() for x in xv[: args.n]])

    local = flow.deploy()
    t0 = time.perf_counter()
    out = local.execute(requests).result()
    local.close()
    print(f"dataflow executor: {len(out)} answers in {time.perf_counter() - t0:.2f} s, first: {out[0].as_dict()}")

    profile = Profile.from_scores(  # fixed_plan needs each model's memory; the scores give the records
        "digits",
        [ModelProfile(n, 1.0, RuntimeCurve((1,), (1.0,))) for n in names],
        yv,
        {m.name: m.predict(xv) for m in models},
        source="examples/flow_digits_pipeline.py",
    )
    gears = flow.deploy("gears", profile=profile, devices=[Device(name="cpu0", memory_mb=512)])
    t0 = time.perf_counter()
    served = gears.execute(requests).result()
    gears.close()
    print(f"gear runtime:      {len(served)} answers in {time.perf_counter() - t0:.2f} s")
    same = [tuple(r) for r in out] == [tuple(r) for r in served]
    acc = np.mean([WORDS.index(r["word"]) == y for r, y in zip(out, yv[: args.n], strict=True)])
    print(f"same answers: {same}; accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
