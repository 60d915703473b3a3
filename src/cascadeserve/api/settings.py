"""How ``serve``'s options become the runtime's and the serving layer's settings, each checked up front: a bad
option fails at once with one line naming it, before any model loads or any measurement runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cascadeserve.errors import CascadeServeError
from cascadeserve.http.clipper import ClipperOptions
from cascadeserve.plan import SLO, Device, GearPlan, load_plan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.adaptive import BATCHING, batch_limit_for, batch_target_s
from cascadeserve.policy.replan import REPLAN_MODES, DriftSettings, scaling_applies
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.runtime.replanner import ReplanOptions
from cascadeserve.runtime.tuning import TuningFactory

__all__ = [
    "batch_sizes",
    "clipper_options",
    "devices_from",
    "drift_settings_from",
    "headroom_note",
    "layer_options",
    "replan_options",
    "slo_from",
    "tuning_options",
    "with_batch_target",
]


def clipper_options(cache_size: int, batching: str | None, plan: GearPlan) -> dict[str, Any]:
    """The Clipper serving-layer options as RuntimeOptions fields, checked up front (one line per bad option)."""
    if cache_size < 0:
        raise CascadeServeError(f"--cache-size: {cache_size} is negative (0 turns the cache off)")
    out: dict[str, Any] = {"cache_size": cache_size or None}
    if batching is not None:
        if batching not in BATCHING:
            raise CascadeServeError(f"--batching: {batching!r} is not one of {', '.join(BATCHING)}")
        out["batching"] = batching
    try:
        batch_limit_for(plan, out.get("batching"))
    except ValueError as e:
        raise CascadeServeError(f"--batching: {e}") from None
    return out


def with_batch_target(plan: GearPlan, batching: str | None, slo_ms: float | None) -> GearPlan:
    """``plan`` with the adaptive batching target taken from the SLO the user gave (``--slo-p95-ms``), where the
    plan sets none; the target itself is the policy's rule (:func:`~cascadeserve.policy.adaptive.batch_target_s`)."""
    kind = batching or plan.batching
    if kind not in ("aimd", "quantile") or plan.batch_target_ms is not None or slo_ms is None:
        return plan
    target_s = batch_target_s(plan, slo_ms=slo_ms)
    return plan.model_copy(update={"batch_target_ms": target_s * 1000.0})


def tuning_options(
    tune: bool, target: float | None, budget: float, audit: float | None, reference: str, plan: GearPlan, prof: Profile
) -> TuningFactory | None:
    """``serve --tune``: the factory of each served plan's online tuning, checked up front (one line per option)."""
    if not tune:
        for opt, v in (("--tune-target", target), ("--audit-fraction", audit)):
            if v is not None:
                raise CascadeServeError(f"{opt} needs --tune")
        return None
    if reference not in ("audit", "label"):
        raise CascadeServeError(f"--tune-reference: {reference!r} is not one of audit, label")
    fraction = audit if audit is not None else (plan.audit_fraction or 0.02)
    if not fraction > 0:
        raise CascadeServeError("--audit-fraction: must be above 0")

    rows = {m: prof.index(m) for m in prof.model_names}

    def make(tables: PlanTables) -> OnlineTuning:
        # targets and stage costs come from the profile's rows (a real-model runtime numbers its models as its
        # config does); the windows and decisions are per gear and stage, whatever the numbering
        return OnlineTuning.for_plan(
            PlanTables(tables.plan, rows), prof, target=target, budget=budget, audit_fraction=fraction,
            reference=reference,
        )  # fmt: skip

    return make


def layer_options(
    alternatives: list[str], selection: str, store: Path, slo_ms: float | None, default: int | None, prof: Profile
) -> ClipperOptions:
    if selection not in ("exp3", "exp4"):
        raise CascadeServeError(f"--selection: {selection!r} is not one of exp3, exp4")
    alts: list[tuple[str, GearPlan]] = []
    for spec in alternatives:
        alt_name, sep, path = spec.partition("=")
        if not sep or not alt_name or not path:
            raise CascadeServeError(f"--alternative: {spec!r} is not NAME=PLAN.json")
        alts.append((alt_name, load_plan(Path(path), prof)))
    return ClipperOptions(
        alternatives=tuple(alts),
        selection="exp4" if selection == "exp4" else "exp3",
        store_path=store,
        slo_ms=slo_ms,
        default_output=default,
    )


def headroom_note(plan: GearPlan, *, emulate: bool, replan: str) -> str | None:
    """A hint when re-planning on emulated devices from a plan with no device headroom: such a runtime's per-batch
    cost grows with load, and a re-plan made to sit near saturation then misses the SLO
    (RESULTS.md, "Device headroom closes load drift's p95 on the runtime")."""
    if not emulate or replan == "off" or plan.max_busy < 1:
        return None
    return (
        "note: the plan keeps no device headroom, and re-plans inherit that; emulated devices spend about 0.5-1 ms "
        "per batch beyond the profile, so a re-plan that keeps a device nearly always busy can miss the SLO here. "
        "Plan with --max-busy 0.75 (docs/tuning-and-replanning.md: device headroom)."
    )


def replan_options(
    mode: str,
    scaling: str,
    plan: GearPlan,
    profile: Path,
    *,
    threshold: float,
    window_s: float,
    min_s: float,
    cooldown_s: float,
    timeout_s: float,
) -> ReplanOptions | None:
    """``--replan`` and ``--qps-scaling`` as the runtime's options (``None``: neither is on), checked up front."""
    if not (timeout_s > 0 and timeout_s < float("inf")):
        raise CascadeServeError(f"--replan-timeout-s: {timeout_s} must be a positive number")
    settings = drift_settings_from(
        mode, scaling, plan, threshold=threshold, window_s=window_s, min_s=min_s, cooldown_s=cooldown_s
    )
    return None if settings is None else ReplanOptions(settings, profile, timeout_s)


def drift_settings_from(
    mode: str,
    scaling: str,
    plan: GearPlan,
    *,
    threshold: float,
    window_s: float,
    min_s: float,
    cooldown_s: float,
) -> DriftSettings | None:
    """``--replan``, ``--qps-scaling`` and the drift thresholds (``serve`` and ``simulate``), checked; ``None`` when
    neither re-planning nor scaling is on for ``plan``."""
    if mode not in REPLAN_MODES:
        raise CascadeServeError(f"--replan: {mode!r} is not one of auto, notify, off")
    if scaling not in ("auto", "on", "off"):
        raise CascadeServeError(f"--qps-scaling: {scaling!r} is not one of auto, on, off")
    if not 0 < threshold <= 1:
        raise CascadeServeError(f"--replan-threshold: {threshold} must be in (0, 1]")
    for opt, v in (("--replan-window-s", window_s), ("--replan-min-s", min_s)):
        if not (v > 0 and v < float("inf")):
            raise CascadeServeError(f"{opt}: {v} must be a positive number")
    if not cooldown_s >= 0:
        raise CascadeServeError(f"--replan-cooldown-s: {cooldown_s} must not be negative")
    on = None if scaling == "auto" else scaling == "on"
    if mode == "off" and not (scaling_applies(plan) if on is None else on):
        return None
    if mode != "off" and plan.slo is None:
        raise CascadeServeError("--replan: the plan records no SLO, so it cannot be re-planned")
    return DriftSettings.from_seconds(
        mode,
        tick_ms=plan.tick_ms,
        window_s=window_s,
        min_s=min_s,
        threshold=threshold,
        cooldown_s=cooldown_s,
        scaling=on,
    )


def devices_from(count: int, memory_mb: float, kind: str = "cpu") -> tuple[Device, ...]:
    if count < 1:
        raise CascadeServeError("--devices must be at least 1")
    if memory_mb <= 0:
        raise CascadeServeError("--device-memory-mb must be positive")
    return tuple(Device(name=f"dev{i}", memory_mb=memory_mb, kind=kind) for i in range(count))


def slo_from(p95_ms: float | None, accuracy: float | None) -> SLO:
    """Exactly one of ``--slo-p95-ms`` and ``--slo-accuracy``."""
    if (p95_ms is None) == (accuracy is None):
        raise CascadeServeError("give exactly one SLO: --slo-p95-ms L or --slo-accuracy A")
    if p95_ms is not None:
        if p95_ms <= 0:
            raise CascadeServeError("--slo-p95-ms must be positive")
        return SLO(kind="p95_ms", value=p95_ms)
    assert accuracy is not None
    if not 0 < accuracy <= 1:
        raise CascadeServeError("--slo-accuracy must lie in (0, 1]")
    return SLO(kind="accuracy", value=accuracy)


def batch_sizes(value: str) -> tuple[int, ...]:
    """``"1,2,4,...,256"`` (a literal ``...`` doubles up to the last) or ``"1,8,64"``."""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    try:
        if "..." in parts:
            i = parts.index("...")
            head = [int(p) for p in parts[:i]]
            last = int(parts[-1])
            sizes = list(head)
            while sizes and sizes[-1] * 2 <= last:
                sizes.append(sizes[-1] * 2)
            if not sizes or sizes[-1] != last:
                sizes.append(last)
        else:
            sizes = [int(p) for p in parts]
    except (ValueError, IndexError):
        raise CascadeServeError(f"--batch-sizes: {value!r} must be integers such as 1,2,4,...,256") from None
    if not sizes or any(b < 1 for b in sizes) or sizes != sorted(set(sizes)):
        raise CascadeServeError(f"--batch-sizes: {value!r} must be positive and strictly increasing")
    return tuple(sizes)
