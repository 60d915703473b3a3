"""The Profile: everything measured about a model family that the planner and simulator need.

Per model: its name, memory per replica, a :class:`RuntimeCurve` and, for an LLM stage, its token costs
(:mod:`cascadeserve.profile.tokens`). Per validation sample: the label and, per
model, the prediction and the certainty. Records are stored as dense numpy arrays indexed
``[model, sample]`` so that cascade evaluation and simulation are vectorised; no model ever runs here.

Models are kept in the order the profile lists them. Cascades name models, and :meth:`Profile.index` maps
names to rows.

Batch limits: a model may declare ``max_batch``, the largest batch its server can form (memory, the framework's
maximum). :attr:`ModelProfile.batch_limit` is that, or, when none is declared, the largest profiled batch size:
past it a runtime would only be a linear extrapolation, which makes batching look free on a flat curve (a batch
of 4,096 priced at a few ms), so nothing that plans batches goes beyond it unless the profile asks by declaring a
larger ``max_batch``.

``batch_overhead_ms`` (profile-wide, default 0) is a deployment's fixed cost per batch beyond the models' runtimes
(dispatch, event loop and thread wake-ups), measured by ``profile measure``; the planner plans with it and puts it
in the plan, so the simulator charges it.

``calibration`` (default empty) says how the runtimes were scaled to the costs measured on a serving host
(:mod:`cascadeserve.profile.calibration`); plans made from the profile repeat it in their ``costs`` note.

``notes`` (default none) are what ``profile measure`` found doubtful about its runtimes, and each model's ``timing``
how its curve was measured (:mod:`cascadeserve.profile.noise`); ``plan`` repeats the notes as a warning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from cascadeserve.profile.certainty import CertaintyFn, certainty_function
from cascadeserve.profile.runtime import RuntimeCurve
from cascadeserve.profile.spread import MAX_SPREAD
from cascadeserve.profile.timing import ModelTiming
from cascadeserve.profile.tokens import TokenCost

__all__ = ["ModelProfile", "Profile"]


@dataclass(frozen=True)
class ModelProfile:
    """Measured facts about one model: memory per replica and batch runtimes."""

    name: str
    memory_mb: float
    runtime: RuntimeCurve
    max_batch: int | None = None  # declared largest batch; None: the largest profiled batch size
    # An LLM stage's token costs (profile/tokens.py): a batch costs what its longest prompt and output cost
    tokens: TokenCost | None = field(default=None, compare=False)
    # how many times slower a batch runs while every other device of the host is busy (profile/host.py; 1: never)
    busy_factor: float = 1.0
    # served by another server (an upstream stage: models/upstream.py): it waits on the network, not on this host's
    # devices, so every plan gives it a device of its own, outside the local ones (plan.upstream_devices)
    upstream: bool = False
    # the σ of a log-normal factor (mean 1) on each batch's time beyond what the runtime curve, the token costs and
    # the host's load explain (profile/spread.py; 0: every batch costs exactly its rule): a queue's tail near
    # saturation grows with it
    batch_spread: float = 0.0
    # how the runtime curve was measured: each point's runs, interval and spread, the host's load (profile/noise.py);
    # None for a profile made elsewhere
    timing: ModelTiming | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a model needs a non-empty name")
        if not np.isfinite(self.memory_mb) or self.memory_mb < 0:
            raise ValueError(f"model {self.name!r}: memory_mb must be a non-negative number")
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"model {self.name!r}: max_batch must be a positive integer")
        if not (np.isfinite(self.busy_factor) and self.busy_factor > 0):
            raise ValueError(f"model {self.name!r}: busy_factor must be a positive number")
        if not (np.isfinite(self.batch_spread) and 0.0 <= self.batch_spread <= MAX_SPREAD):
            raise ValueError(f"model {self.name!r}: batch_spread must be a number in [0, {MAX_SPREAD:.4g}]")

    @property
    def batch_limit(self) -> int:
        """The largest batch anything may plan for this model: the declared ``max_batch`` (which may lie past the
        profiled sizes: the profile asks for extrapolation), else the largest profiled batch size."""
        return self.max_batch if self.max_batch is not None else self.runtime.batch_sizes[-1]


@dataclass(frozen=True, eq=False)
class Profile:
    """A model family's profile. ``predictions``/``certainties`` have shape ``[n_models, n_samples]``."""

    name: str
    models: tuple[ModelProfile, ...]
    sample_ids: np.ndarray
    labels: np.ndarray
    predictions: np.ndarray
    certainties: np.ndarray
    task: str = "classification"
    device: str = ""
    source: str = ""
    batch_overhead_ms: float = 0.0
    # The Ray backend's latency per process hop (a stage's actor call and its answer's way back; no device time),
    # measured by ``serve --emulate --backend ray`` at start-up; plans made for Ray charge it (simulate/hops.py).
    ray_hop_ms: float = 0.0
    # and the hop's 95th percentile: with it the simulator draws each hop from a log-normal of that mean and p95
    # (a hop's tail is long on a busy host, and a request's p95 sees it); 0: every hop costs the mean
    ray_hop_p95_ms: float = 0.0
    # The front door's latency per request as a client sees it beyond the server's admission-to-answer time (HTTP
    # parsing and encoding, the event loop's other work, the client's own share of the CPU), mean and p95, measured
    # by ``bench`` and recorded by ``profile calibrate --bench``; every simulated answer pays a draw (simulate/hops.py)
    front_door_ms: float = 0.0
    front_door_p95_ms: float = 0.0
    calibration: str = ""  # how the runtimes were calibrated to a serving host (profile/calibration.py); "" if not
    # what measuring found doubtful: unstable points, falling curves, near-zero runtimes, a busy host (profile/noise.py)
    notes: tuple[str, ...] = ()
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        if not names:
            raise ValueError("a profile needs at least one model")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate model names: {', '.join(dupes)}")
        n = len(self.labels)
        if n == 0:
            raise ValueError("a profile needs at least one validation sample")
        shape = (len(names), n)
        if self.predictions.shape != shape or self.certainties.shape != shape:
            raise ValueError(f"records must have shape {shape}")
        if len(self.sample_ids) != n:
            raise ValueError("sample_ids and labels differ in length")
        if np.any(~np.isfinite(self.certainties)) or np.any(self.certainties < 0) or np.any(self.certainties > 1):
            raise ValueError("certainties must lie in [0, 1]")
        if not (np.isfinite(self.batch_overhead_ms) and self.batch_overhead_ms >= 0):
            raise ValueError("batch_overhead_ms must be a finite number ≥ 0")
        for name in ("ray_hop_ms", "ray_hop_p95_ms", "front_door_ms", "front_door_p95_ms"):
            if not (np.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be a finite number ≥ 0")
        for m in self.models:
            if m.tokens is not None and len(m.tokens.prompt_tokens) != n:
                raise ValueError(f"model {m.name!r}: token counts for {len(m.tokens.prompt_tokens)} samples, not {n}")
        object.__setattr__(self, "_index", {m: i for i, m in enumerate(names)})
        for arr in (self.sample_ids, self.labels, self.predictions, self.certainties):
            arr.setflags(write=False)

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_scores(
        cls,
        name: str,
        models: Sequence[ModelProfile],
        labels: np.ndarray,
        scores: Mapping[str, np.ndarray],
        *,
        certainty: str | CertaintyFn = "margin",
        sample_ids: np.ndarray | None = None,
        **meta: Any,
    ) -> Profile:
        """Build a profile from raw per-class scores ``scores[model] -> [n_samples, n_classes]``."""
        fn = certainty_function(certainty)
        labels = np.asarray(labels, dtype=np.int64)
        preds = np.empty((len(models), len(labels)), dtype=np.int64)
        certs = np.empty((len(models), len(labels)), dtype=np.float64)
        for i, m in enumerate(models):
            s = np.asarray(scores[m.name], dtype=np.float64)
            if s.shape[0] != len(labels):
                raise ValueError(f"model {m.name!r}: {s.shape[0]} score rows for {len(labels)} samples")
            preds[i] = s.argmax(axis=1)
            certs[i] = np.clip(np.asarray(fn(s), dtype=np.float64), 0.0, 1.0)
        ids = np.arange(len(labels), dtype=np.int64) if sample_ids is None else np.asarray(sample_ids)
        return cls(
            name=name,
            models=tuple(models),
            sample_ids=ids,
            labels=labels,
            predictions=preds,
            certainties=certs,
            **meta,
        )

    def with_request_tokens(self, samples: np.ndarray, tokens: np.ndarray) -> Profile:
        """One sample per request: request ``i`` is answered as validation sample ``samples[i]`` is, and an LLM
        stage prices it by ``tokens[i]`` (its prompt and output tokens: a trace's), its cost tables still anchored
        on the validation set (:meth:`~cascadeserve.profile.tokens.TokenCost.replayed`). What ``simulate
        --trace-tokens`` replays, with request ``i`` on sample ``i``."""
        idx = np.asarray(samples, dtype=np.int64)
        tok = np.asarray(tokens, dtype=np.int64)
        if tok.shape != (len(idx), 2):
            raise ValueError(f"tokens must be [{len(idx)}, 2] (prompt, output per request), got {list(tok.shape)}")
        models = tuple(
            m if m.tokens is None else dataclasses.replace(m, tokens=m.tokens.replayed(idx, tok[:, 0], tok[:, 1]))
            for m in self.models
        )
        return dataclasses.replace(
            self,
            models=models,
            sample_ids=self.sample_ids[idx],
            labels=self.labels[idx],
            predictions=self.predictions[:, idx],
            certainties=self.certainties[:, idx],
        )

    # -- lookups ------------------------------------------------------------------------------------------
    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    @property
    def n_samples(self) -> int:
        return len(self.labels)

    def index(self, model: str) -> int:
        try:
            return self._index[model]
        except KeyError:
            raise KeyError(f"unknown model {model!r}; the profile has {', '.join(self.model_names)}") from None

    def model(self, name: str) -> ModelProfile:
        return self.models[self.index(name)]

    @cached_property
    def correct(self) -> np.ndarray:
        """``[n_models, n_samples]`` booleans: is each model's prediction right."""
        c = np.asarray(self.predictions == self.labels[None, :], dtype=bool)
        c.setflags(write=False)
        return c

    @cached_property
    def accuracies(self) -> np.ndarray:
        return np.asarray(self.correct.mean(axis=1), dtype=np.float64)

    def by_cost(self, batch_size: int = 1) -> list[str]:
        """Model names from cheapest to costliest per sample at the given batch size (ties by name)."""
        return sorted(self.model_names, key=lambda n: (self.model(n).runtime.per_sample_ms(batch_size), n))

    def summary(self) -> list[dict[str, float | str]]:
        """Per model: accuracy, runtime at batch 1 and 64, memory (what ``profile show`` prints)."""
        rows: list[dict[str, float | str]] = []
        for i, m in enumerate(self.models):
            rows.append(
                {
                    "model": m.name,
                    "accuracy": float(self.accuracies[i]),
                    "runtime_ms_b1": float(m.runtime.ms_at(1)),
                    "runtime_ms_b64": float(m.runtime.ms_at(64)),
                    "memory_mb": float(m.memory_mb),
                }
            )
        return rows
