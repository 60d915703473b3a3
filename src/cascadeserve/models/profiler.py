"""The profiler: measure a real model family and write the profile interchange format.

For every model, in the config's order:

1. **Load** it and measure memory per replica: the config's ``memory_mb`` hint if given, else what the adapter
   knows (parameters and buffers for torch, the serialized size for scikit-learn and ONNX), else the process's
   resident-set growth across ``load()``.
2. **Predict** every validation sample (in chunks), check that the labels are inside the model's classes (the
   row of the first offender is named), and turn scores into certainty with the config's certainty function.
3. **Time** each batch size: ``warmup`` untimed runs, then at least ``repeats`` timed ones, more until the mean is
   known to within ``ci_target`` (the 95 % interval's relative half-width) or ``max_repeats`` ran (fewer if one batch
   size has already taken ``budget_s``), each on a *different* batch drawn at random (seeded) from the validation
   set, and record their mean, the slowest run left out from five runs on (one stall of the OS), with how well it is
   known (:mod:`cascadeserve.profile.noise`: runs, interval, spread, stable) and the host's load. A served batch holds
   whatever requests arrived, and a text model's cost follows their lengths: timing the first ``b`` samples over
   and over measured one batch's content (MiniLM-L6 on the sentences set: 63 ms for the first two sentences,
   26 ms on average over random pairs; batches of four range 24-88 ms), and a queue's wait follows the mean
   service time. Thread counts are fixed before
   timing and written into the profile's ``device`` line, because runtimes mean little without them.

After each model, its predictions (``predictions/<model>.csv``) and facts (``measured/<model>.json``, with a
fingerprint of the model's config, the validation data and the options) are written, and ``profile.yaml`` is
rewritten for the models measured so far, with the notes its curves raise (unstable points, a falling curve,
near-zero runtimes, a busy host: :func:`~cascadeserve.profile.noise.measurement_notes`). A rerun skips every
model whose fingerprint matches (:mod:`cascadeserve.models.records`), so an interrupted run resumes where it
stopped; change a model's config and only that model is measured again.

A model with a ``tokens`` hook in the config (a text encoder, whose batch is padded to its longest input) also gets
a token cost model: each validation sample's token count, and per batch size a fixed part and a price per token of
the batch's longest input, fitted on the same random batches that were timed (``llm/costs.json`` with task
``encode``, ``llm/tokens/<model>.csv``). Every engine then prices its batches by their longest input, as it does an
LLM stage's prompts (:mod:`cascadeserve.profile.tokens`); the runtime curve stays the mean over random batches.

An LLM stage (:class:`~cascadeserve.models.llm_adapter.LLMAdapter`) on a labelled LLM set is measured by
:mod:`cascadeserve.models.llm_profile`, which also writes the profile's ``llm/`` side files (every certainty
signal, token counts, the token cost model, calibration).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.adapters import Adapter
from cascadeserve.models.base import ModelLoadError
from cascadeserve.models.config import ModelsConfig, resolve
from cascadeserve.models.dataset import ValidationSet
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.llm_profile import measure_llm
from cascadeserve.models.records import MEASURED_DIR, ModelRecord, resume_record
from cascadeserve.models.timing import fit_fixed_and_slope, point_noise, repeat_until_stable, timed_mean
from cascadeserve.models.upstream import UpstreamAdapter
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, certainty_function, load_profile, save_profile
from cascadeserve.profile.llm_side import LLMCosts, write_costs, write_tokens
from cascadeserve.profile.noise import CI_TARGET, ModelTiming, PointNoise, host_load, measurement_notes

__all__ = ["DEFAULT_BATCH_SIZES", "TIMING_SEED", "MeasureOptions", "ModelRecord", "measure", "timed_mean"]

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TIMING_SEED = 20_261_126  # the timed batches' draws (plus the batch size)

# progress(model, step, done, total): step is "load", "predict", "time" or "skip" (already measured)
Progress = Callable[[str, str, int, int], None]


@dataclass(frozen=True)
class MeasureOptions:
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    repeats: int = 15  # at least; each on other random inputs: a text batch's cost varies with its content (CV ~35 %)
    max_repeats: int | None = None  # at most, while the mean is not known to within ci_target (None: 4 x repeats)
    ci_target: float = CI_TARGET  # stable: the 95 % interval's half-width within this share of the mean
    warmup: int = 2
    budget_s: float = 3.0  # per batch size: stop repeating (after 3 runs) once this much time went by
    threads: int | None = None  # intra-op threads for every model (None: the config's value, else 1)
    predict_batch: int = 256
    # idle time before each timed run: 0 times batches back to back (a busy server); a pause times each batch as a
    # lightly loaded server runs it, after the device and the caches went idle (on an H100, MiniLM batches ran
    # 1.2-1.7x slower after a 50-200 ms pause than back to back)
    pause_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError("batch sizes must be positive integers")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError("batch sizes must be strictly increasing")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError("repeats must be >= 1 and warmup >= 0")
        if self.max_repeats is not None and self.max_repeats < self.repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be at least repeats ({self.repeats})")
        if not 0.0 < self.ci_target <= 1.0:
            raise ValueError(f"ci_target must be within (0, 1], got {self.ci_target}")
        if not 0.0 <= self.pause_ms <= 10_000.0:
            raise ValueError(f"pause_ms must be within [0, 10000], got {self.pause_ms}")

    @property
    def most_repeats(self) -> int:
        return self.max_repeats if self.max_repeats is not None else 4 * self.repeats


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):  # not Linux: no RSS figure, the adapter's own figure must do
        return 0.0


def _portable(source: str) -> str:
    """A data source as a committed profile may carry it: no machine path (relative to the working directory or its
    parent, where data sits beside a checkout, or under ``~``)."""
    for root, short in ((Path.cwd(), ""), (Path.cwd().parent, "../"), (Path.home(), "~/")):
        prefix = str(root).rstrip("/") + "/"
        if prefix in source and prefix != "/":
            source = source.replace(prefix, short)
    return source


def _fingerprint(spec: Mapping[str, Any], validation: ValidationSet, options: MeasureOptions, threads: int) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(spec, sort_keys=True, default=str).encode())
    h.update(validation.source.encode())
    h.update(np.ascontiguousarray(validation.labels).tobytes())
    # "random": batches drawn from the set (a profile timed on the first samples is measured again)
    timing: tuple[Any, ...] = (options.batch_sizes, options.repeats, options.warmup, threads, "random")
    if spec.get("adapter") == "llm":  # LLM stages: random batches and the fixed/per-token fit (older: the first b)
        timing = (*timing, "llm-fit")
    if options.pause_ms:  # kept out when 0 so that profiles measured before the option resume
        timing = (*timing, options.pause_ms)
    if options.max_repeats is not None or options.ci_target != CI_TARGET:  # likewise the defaults of these
        timing = (*timing, "until-stable", options.most_repeats, options.ci_target)
    h.update(repr(timing).encode())
    return h.hexdigest()[:16]


def _draw(validation: ValidationSet, size: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of ``size`` samples drawn at random (without replacement while the set is large enough)."""
    n = len(validation)
    return np.sort(rng.choice(n, size, replace=size > n))


def _token_counts(name: str, count: Callable[[Any], Any], validation: ValidationSet, chunk: int) -> np.ndarray:
    """Every validation sample's token count from the model's ``tokens`` hook (in chunks)."""
    n = len(validation)
    parts = []
    for start in range(0, n, chunk):
        idx = np.arange(start, min(start + chunk, n))
        got = np.asarray(count(validation.take(idx)))
        if got.shape != (len(idx),) or not np.all(np.isfinite(got)) or (len(got) and got.min() < 0):
            raise ModelLoadError(
                f"model {name!r}: its tokens hook returned {got.shape} values for {len(idx)} inputs at "
                f"{validation.where(start)}; it must return one count >= 0 per input"
            )
        parts.append(got.astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _write_token_costs(
    out: Path,
    name: str,
    validation: ValidationSet,
    tokens: np.ndarray,
    fits: dict[int, tuple[float, float]],
    memory_mb: float,
) -> None:
    """An encoder's token cost model (module docstring): no decoding, no KV cache; its own weights."""
    zeros = [0] * len(tokens)
    write_tokens(out, name, validation.sample_ids.tolist(), tokens.tolist(), zeros, zeros)
    write_costs(
        out,
        name,
        LLMCosts(
            task="encode",
            prefill_ms_per_token={b: slope for b, (_, slope) in fits.items()},
            decode_ms_per_step=dict.fromkeys(fits, 0.0),
            weights_mb=round(memory_mb, 4),
            kv_cache_mb_per_token=0.0,
            prompt_tokens=int(np.median(tokens)) if len(tokens) else 0,
            decode_steps=0,
            mean_prompt_tokens=float(tokens.mean()) if len(tokens) else 0.0,
            mean_output_tokens=0.0,
            fixed_ms={b: fixed for b, (fixed, _) in fits.items()},
        ),
    )


def _set_threads(threads: int) -> None:
    # torch's intra-op pool is process-wide; set it before any model loads so every model is timed alike
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def _measure_llm(
    model: LLMAdapter | UpstreamAdapter,
    memory_hint: float | None,
    validation: ValidationSet,
    certainty: str,
    options: MeasureOptions,
    threads: int,
    fingerprint: str,
    out: Path,
    progress: Progress | None,
) -> ModelRecord:
    if progress:
        progress(model.name, "load", 0, len(options.batch_sizes) + 2)
    m = measure_llm(
        model,
        validation,
        out,
        certainty=certainty,
        batch_sizes=options.batch_sizes,
        repeats=options.repeats,
        warmup=options.warmup,
        budget_s=options.budget_s,
        progress=progress,
    )
    return ModelRecord(
        name=model.name,
        memory_mb=round(memory_hint if memory_hint is not None else m.memory_mb, 4),
        memory_source="config hint" if memory_hint is not None else _memory_source(model),
        runtime_ms=m.runtime_ms,
        accuracy=m.accuracy,
        classes=m.classes,
        threads=threads,
        fingerprint=fingerprint,
        predictions=m.predictions,
        certainties=m.certainties,
    )


def _memory_source(model: LLMAdapter | UpstreamAdapter) -> str:
    return "upstream (no local memory)" if isinstance(model, UpstreamAdapter) else "llm weights"


def _measure_one(
    model: Adapter,
    memory_hint: float | None,
    validation: ValidationSet,
    certainty: Callable[[np.ndarray], np.ndarray],
    options: MeasureOptions,
    threads: int,
    fingerprint: str,
    progress: Progress | None,
    count_tokens: Callable[[Any], Any] | None = None,
    out: Path | None = None,
) -> ModelRecord:
    name = model.name
    if validation.task != "classification":
        raise ModelLoadError(f"model {name!r}: {validation.source} is an LLM set; only an llm model can answer it")
    steps = len(options.batch_sizes) + 2
    if progress:
        progress(name, "load", 0, steps)
    before = _rss_mb()
    model.load()
    rss = max(_rss_mb() - before, 0.0)
    adapter_mb = model.memory_mb()
    if memory_hint is not None:
        memory, source = memory_hint, "config hint"
    elif adapter_mb is not None:
        memory, source = adapter_mb, f"{getattr(model, 'framework', 'adapter')} size"
    else:
        memory, source = rss, "RSS delta"
    memory = max(memory, 0.001)
    if progress:
        progress(name, "predict", 1, steps)

    n = len(validation)
    chunks: list[np.ndarray] = []
    for start in range(0, n, options.predict_batch):
        idx = np.arange(start, min(start + options.predict_batch, n))
        scores = model.predict(validation.take(idx))
        if chunks and scores.shape[1] != chunks[0].shape[1]:
            raise ModelLoadError(
                f"model {name!r}: returned {scores.shape[1]} classes at {validation.where(start)} "
                f"but {chunks[0].shape[1]} before"
            )
        if not chunks:
            validation.check_classes(scores.shape[1], name)
        chunks.append(scores)
    scores = np.concatenate(chunks)
    preds = np.asarray(scores.argmax(axis=1), dtype=np.int64)
    certs = np.clip(np.asarray(certainty(scores), dtype=np.float64), 0.0, 1.0)
    tokens = None if count_tokens is None else _token_counts(name, count_tokens, validation, options.predict_batch)

    runtime: dict[int, float] = {}
    noise: dict[int, PointNoise] = {}
    fits: dict[int, tuple[float, float]] = {}  # per batch size: ms no token pays for, ms per token of the longest
    for k, b in enumerate(options.batch_sizes):
        if progress:
            progress(name, "time", 2 + k, steps)
        rng = np.random.default_rng(TIMING_SEED + b)  # the same batches on every run of the profiler
        for _ in range(options.warmup):
            model.predict(validation.take(_draw(validation, b, rng)))
        longest: list[int] = []
        run = functools.partial(_timed_run, model, validation, b, rng, tokens, options.pause_ms, longest)
        samples = repeat_until_stable(
            run, least=options.repeats, most=options.most_repeats, target=options.ci_target,
            budget_s=options.budget_s, pause_s=options.pause_ms / 1000.0,
        )  # fmt: skip
        runtime[b] = max(timed_mean(samples), 1e-4)
        noise[b] = point_noise(samples, options.ci_target)
        if tokens is not None:  # every run counts here: a slow one is a long input, which is what is fitted
            fits[b] = fit_fixed_and_slope(np.asarray(longest, dtype=np.float64), np.asarray(samples), 0.0)
    if tokens is not None and out is not None:
        _write_token_costs(out, name, validation, tokens, fits, memory)
    if progress:
        progress(name, "done", steps, steps)
    return ModelRecord(
        name=name,
        memory_mb=round(memory, 4),
        memory_source=source,
        runtime_ms=runtime,
        accuracy=float((preds == validation.labels).mean()),
        classes=int(scores.shape[1]),
        threads=threads,
        fingerprint=fingerprint,
        predictions=preds,
        certainties=certs,
        timing=ModelTiming(noise),
    )


def _timed_run(
    model: Adapter,
    validation: ValidationSet,
    b: int,
    rng: np.random.Generator,
    tokens: np.ndarray | None,
    pause_ms: float,
    longest: list[int],
) -> float:
    """One timed run of a random batch of ``b`` (after ``pause_ms`` idle): its milliseconds; its longest input's
    token count goes to ``longest``."""
    rows = _draw(validation, b, rng)
    batch = validation.take(rows)
    if pause_ms > 0:
        time.sleep(pause_ms / 1000.0)
    t0 = time.perf_counter()
    model.predict(batch)
    ms = (time.perf_counter() - t0) * 1000.0
    longest.append(0 if tokens is None else int(tokens[rows].max()))
    return ms


def _device_line(threads: int, placed: Mapping[str, str] | None = None) -> str:
    """Where the runtimes were measured: the CPU, and each accelerator with the models that ran on it (a
    profile's runtimes mean little without the hardware; a model's ``device`` in the config says which)."""
    cpu = platform.processor() or platform.machine()
    line = f"cpu ({cpu}, {os.cpu_count()} cores), {threads} intra-op thread(s) per model"
    on: dict[str, list[str]] = {}
    for model, device in (placed or {}).items():
        if device != "cpu":
            on.setdefault(device, []).append(model)
    for device, names in on.items():
        what = _accelerator_name(device)
        line += f"; {device}{'' if what == device else f' ({what})'}: {', '.join(names)}"
    return line


def _accelerator_name(device: str) -> str:
    if device.startswith("cuda"):
        try:
            import torch

            return str(torch.cuda.get_device_name(torch.device(device)))
        except Exception:  # a name for a report line; the measurement itself already ran
            return "unknown GPU"
    return device


def _write(
    out: Path,
    name: str,
    records: Sequence[ModelRecord],
    validation: ValidationSet,
    source: str,
    placed: Mapping[str, str] | None = None,
    upstream: frozenset[str] = frozenset(),
) -> Profile:
    threads = records[0].threads
    prof = Profile(
        name=name,
        models=tuple(
            ModelProfile(
                r.name,
                r.memory_mb,
                RuntimeCurve.from_mapping(r.runtime_ms),
                upstream=r.name in upstream,
                timing=r.timing,
            )
            for r in records
        ),
        sample_ids=validation.sample_ids,
        labels=validation.labels,
        predictions=np.stack([r.predictions for r in records]),
        certainties=np.stack([r.certainties for r in records]),
        device=_device_line(threads, placed),
        source=source,
    )
    prof = dataclasses.replace(prof, notes=measurement_notes(prof))
    save_profile(prof, out)
    return prof


def measure(
    config: ModelsConfig,
    validation: ValidationSet,
    out: str | Path,
    *,
    name: str | None = None,
    options: MeasureOptions | None = None,
    models: Mapping[str, Adapter] | None = None,
    progress: Progress | None = None,
    resume: bool = True,
) -> tuple[Profile, list[ModelRecord]]:
    """Measure every model of ``config`` on ``validation`` and write the profile to ``out``.

    ``models`` may pass already-built adapters (by name) instead of building them from the config. Returns the
    profile (as :func:`~cascadeserve.profile.load_profile` will read it) and the per-model records.
    """
    opts = options or MeasureOptions()
    out_dir = Path(out)
    (out_dir / MEASURED_DIR).mkdir(parents=True, exist_ok=True)
    threads = opts.threads or config.threads or 1
    _set_threads(threads)
    adapters = dict(models) if models is not None else config.build()
    llm_set = validation.task != "classification"
    # an LLM set's certainty may name a generation signal, which needs token log-probs, not scores
    certainty = certainty_function("margin" if llm_set else config.certainty.replace("_", "-"))
    records: list[ModelRecord] = []
    source = f"cascadeserve profile measure on {_portable(validation.source)} ({len(validation)} samples)"
    if opts.pause_ms:  # the runtimes are an idle device's: say so where a reader of the profile looks
        source += f", {opts.pause_ms:g} ms idle before each timed batch"
    load_before = host_load()  # before this run measured anything (the load after counts its own threads)
    for spec in config.models:
        fp = _fingerprint(spec.model_dump(mode="json"), validation, opts, threads)
        rec = resume_record(out_dir, spec.name, fp, validation) if resume else None
        if rec is None:
            model = adapters[spec.name]
            if getattr(model, "threads", None) is None and hasattr(model, "threads"):
                setattr(model, "threads", threads)  # noqa: B010  (only adapters that have the knob)
            if isinstance(model, LLMAdapter | UpstreamAdapter):
                cert = config.certainty.replace("_", "-")
                rec = _measure_llm(model, spec.memory_mb, validation, cert, opts, threads, fp, out_dir, progress)
            else:
                count = resolve(spec.tokens, what=f"model {spec.name!r}: tokens") if spec.tokens else None
                rec = _measure_one(
                    model, spec.memory_mb, validation, certainty, opts, threads, fp, progress, count, out_dir
                )
            load_after = host_load()
            points = {} if rec.timing is None else rec.timing.points
            timing = ModelTiming(points, load_before, load_after, os.cpu_count() or 1, threads, opts.ci_target)
            rec = dataclasses.replace(rec, timing=timing)
            (out_dir / MEASURED_DIR / f"{spec.name}.json").write_text(
                json.dumps(rec.to_json(), indent=2), encoding="utf-8"
            )
        elif progress:
            progress(spec.name, "skip", 1, 1)
        records.append(rec)
        # an LLM stage asked for CUDA on a machine without it ran on the CPU: the device line says where it ran
        placed = {m.name: str(getattr(adapters.get(m.name), "device_used", m.device)) for m in config.models}
        remote = frozenset(s.name for s in config.models if s.adapter == "upstream")  # plans give each its own device
        _write(out_dir, name or out_dir.name, records, validation, source, placed, remote)
    prof = load_profile(out_dir)
    return prof, records
