"""The digits family: five torch models of rising cost on ``sklearn.datasets.load_digits`` (8x8 images, 10 classes).

From cheapest to costliest: ``logreg`` (one linear layer), ``mlp`` (one hidden layer of 128), ``cnn-small``
(16 3x3 filters and a linear head), ``cnn`` (32 then 64 filters, a 128-unit head) and ``cnn-wide`` (64, 128 and
128 filters, a 256-unit head, trained on images shifted by up to one pixel and served with 9-view test-time
augmentation: the mean of its softmax over the nine one-pixel shifts), roughly 0.6k to 70M multiply-adds per
image. The test-time augmentation is what makes the top model costly enough (about 3 ms per image on one core)
that a burst of a few hundred requests per second overwhelms it on two cores, as a BERT-base does on a GPU in
the paper; without it every model here is faster than the HTTP stack in front of it. Every model takes the raw 64 pixel
values (0..16) as float32 ``[n, 64]`` and scales and reshapes them itself, so one request format serves all.

The 1,797 images are split once, stratified with a fixed seed, into 1,197 for training and 600 for validation
(what the profiler measures and the demo replays). Training is Adam on one thread (two threads thrash on a busy
2-core machine) for a few epochs per model: about 15 s for the family (``quick`` trains three models for half
of the epochs). Trained weights are cached under the user cache dir (``platformdirs``; ``CASCADESERVE_CACHE_DIR``
overrides it), keyed by a hash of this file's source, the seed and the epochs, so a code change retrains and a
rerun loads in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cascadeserve.models.base import require
from cascadeserve.models.dataset import ValidationSet

__all__ = [
    "ARCHS",
    "QUICK_ARCHS",
    "cache_dir",
    "load",
    "split",
    "train_family",
    "validation_set",
    "write_config",
]

# arch -> epochs (full run); quick runs use QUICK_ARCHS with a third of the epochs
ARCHS: dict[str, int] = {"logreg": 40, "mlp": 30, "cnn-small": 20, "cnn": 10, "cnn-wide": 10}
QUICK_ARCHS = ("logreg", "cnn-small", "cnn-wide")
AUGMENTED = ("cnn-wide",)  # trained with random one-pixel shifts, served with 9-view test-time augmentation
N_VALIDATION = 600


def cache_dir() -> Path:
    env = os.environ.get("CASCADESERVE_CACHE_DIR")
    if env:
        return Path(env)
    platformdirs = require("platformdirs")
    return Path(platformdirs.user_cache_dir("cascadeserve"))


@cache
def split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_val, y_val, val_index)``: a stratified split of load_digits (x float32 in 0..16)."""
    datasets = require("sklearn.datasets")
    d = datasets.load_digits()
    x = np.asarray(d.data, dtype=np.float32)
    y = np.asarray(d.target, dtype=np.int64)
    rng = np.random.default_rng(seed)
    # stratified: every class gets its share of the validation split (largest remainders fill it to exactly N)
    counts = np.bincount(y, minlength=10)
    share = counts * N_VALIDATION / len(y)
    take = np.floor(share).astype(int)
    take[np.argsort(-(share - take))[: N_VALIDATION - int(take.sum())]] += 1
    val: list[int] = []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        val.extend(idx[: take[c]].tolist())
    val_idx = np.sort(np.asarray(val))
    mask = np.ones(len(y), dtype=bool)
    mask[val_idx] = False
    return x[mask], y[mask], x[val_idx], y[val_idx], val_idx


def validation_set(seed: int = 0) -> ValidationSet:
    """The held-out digits, with their index in load_digits as the sample id."""
    _, _, xv, yv, idx = split(seed)
    return ValidationSet(xv, yv, idx.astype(np.int64), f"digits (sklearn load_digits, seed {seed} split)")


def _build(arch: str) -> Any:
    torch = require("torch")
    nn = torch.nn

    class Pixels(nn.Module):  # type: ignore[misc,name-defined]
        """[n, 64] raw pixels (0..16) -> [n, 1, 8, 8] in 0..1."""

        def forward(self, x: Any) -> Any:
            return (x / 16.0).reshape(-1, 1, 8, 8)

    if arch == "logreg":
        body = [nn.Flatten(), nn.Linear(64, 10)]
    elif arch == "mlp":
        body = [nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)]
    elif arch == "cnn-small":
        body = [nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 10)]
    elif arch == "cnn":
        body = [
            *(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU()),
            *(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, 10)),
        ]
    elif arch == "cnn-wide":
        body = [
            *(nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU()),
            *(nn.MaxPool2d(2), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.Flatten()),
            *(nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 10)),
        ]
    else:
        raise ValueError(f"unknown digits architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return nn.Sequential(Pixels(), *body)


def _shift(img: Any, gen: Any) -> Any:
    """Each image moved by a random offset in {-1, 0, 1}^2 (zero padding)."""
    torch = require("torch")
    pad = torch.nn.functional.pad(img, (1, 1, 1, 1))
    n = len(img)
    dy = torch.randint(0, 3, (n,), generator=gen)
    dx = torch.randint(0, 3, (n,), generator=gen)
    out = torch.empty_like(img)
    for a in range(3):
        for b in range(3):
            m = (dy == a) & (dx == b)
            out[m] = pad[m][:, :, a : a + 8, b : b + 8]
    return out


def _tta(model: Any) -> Any:
    """Wrap a trained model: mean softmax over the nine one-pixel shifts of each image."""
    torch = require("torch")
    pixels, net = model[0], torch.nn.Sequential(*list(model)[1:])

    class ShiftTTA(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.pixels, self.net = pixels, net

        def forward(self, x: Any) -> Any:
            pad = torch.nn.functional.pad(self.pixels(x), (1, 1, 1, 1))
            views = [pad[:, :, 1 + dy : 9 + dy, 1 + dx : 9 + dx] for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
            p = torch.softmax(self.net(torch.cat(views)), dim=1)
            return p.reshape(len(views), -1, p.shape[1]).mean(0)

    return ShiftTTA().eval()


def _epochs(arch: str, quick: bool) -> int:
    return max(3, ARCHS[arch] // 2) if quick else ARCHS[arch]


def _key(seed: int, quick: bool) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"seed={seed};quick={quick};epochs={sorted(ARCHS.items())}".encode())
    return h.hexdigest()[:12]


def _path(arch: str, seed: int, quick: bool) -> Path:
    return cache_dir() / "digits" / _key(seed, quick) / f"{arch}.pt"


def _train(arch: str, seed: int, quick: bool, on_epoch: Callable[[int, int], None] | None) -> Any:
    torch = require("torch")
    torch.manual_seed(seed)
    xt, yt, _, _, _ = split(seed)
    model = _build(arch)
    net = torch.nn.Sequential(*list(model)[1:])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2 if arch in ("logreg", "mlp") else 3e-3)
    x, y = model[0](torch.as_tensor(xt)), torch.as_tensor(yt)
    augment = arch in AUGMENTED
    gen = torch.Generator().manual_seed(seed)
    epochs = _epochs(arch, quick)
    model.train()
    for epoch in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(64):
            opt.zero_grad()
            xb = _shift(x[idx], gen) if augment else x[idx]
            loss = torch.nn.functional.cross_entropy(net(xb), y[idx])
            loss.backward()
            opt.step()
        if on_epoch is not None:
            on_epoch(epoch + 1, epochs)
    return model.eval()


def load(arch: str, seed: int = 0, quick: bool = False, train: bool = True) -> Any:
    """The trained model ``arch`` (an ``nn.Module`` in eval mode): from the cache, else trained and cached."""
    torch = require("torch")
    path = _path(arch, seed, quick)
    model = _build(arch)
    if path.is_file():
        model.load_state_dict(torch.load(str(path), map_location="cpu", weights_only=True))
        model.eval()
    elif not train:
        raise FileNotFoundError(f"digits model {arch!r} is not trained yet (no {path})")
    else:
        model = _train(arch, seed, quick, None)
        _save(model, path)
    return _tta(model) if arch in AUGMENTED else model


def _save(model: Any, path: Path) -> None:
    torch = require("torch")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one per process: two that train at once write apart
    torch.save(model.state_dict(), str(tmp))
    tmp.replace(path)  # atomic: a half-written file never looks cached


def train_family(
    seed: int = 0,
    quick: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    threads: int = 1,
) -> dict[str, dict[str, float]]:
    """Train (or load from the cache) every model; ``progress(arch, epoch, epochs)``. Returns per-arch facts."""
    torch = require("torch")
    torch.set_num_threads(threads)
    archs = QUICK_ARCHS if quick else tuple(ARCHS)
    _, _, xv, yv, _ = split(seed)
    out: dict[str, dict[str, float]] = {}
    for arch in archs:
        path = _path(arch, seed, quick)
        t0 = time.perf_counter()
        cached = path.is_file()
        if cached:
            model = load(arch, seed, quick)
            if progress:
                progress(arch, 1, 1)
        else:
            on_epoch = None
            if progress is not None:

                def on_epoch(
                    epoch: int, epochs: int, arch: str = arch, report: Callable[[str, int, int], None] = progress
                ) -> None:
                    report(arch, epoch, epochs)

            model = _train(arch, seed, quick, on_epoch)
            _save(model, path)
            model = _tta(model) if arch in AUGMENTED else model
        with torch.inference_mode():
            acc = float((model(torch.as_tensor(xv)).argmax(1).numpy() == yv).mean())
        out[arch] = {"accuracy": acc, "seconds": time.perf_counter() - t0, "cached": float(cached)}
    return out


def write_config(path: str | Path, seed: int = 0, quick: bool = False, threads: int = 1) -> Path:
    """A models config for the family (what ``profile measure --models`` and ``serve --models`` read)."""
    p = Path(path)
    archs = QUICK_ARCHS if quick else tuple(ARCHS)
    doc = {
        "certainty": "margin",
        "threads": threads,
        "input": {"name": "pixels", "datatype": "FP32", "shape": [-1, 64]},
        "models": [
            {
                "name": a,
                "adapter": "torch",
                "ref": "cascadeserve.models.families.digits:load",
                "kwargs": {"arch": a, "seed": seed, "quick": quick},
                "preprocess": {"dtype": "float32"},
            }
            for a in archs
        ],
    }
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return p
