"""A workload's values by option name: what ``--workload FILE`` makes every command's defaults, and what
:meth:`cascadeserve.ServeConfig.for_workload` serves with. Every concept has one name across commands, so one table
serves them all; each command takes the subset it has."""

from __future__ import annotations

import os
from typing import Any

from cascadeserve.workload.state import StateDir

__all__ = ["workload_values"]


def workload_values(state: StateDir) -> dict[str, Any]:
    """Every option a workload sets, by parameter name (``slo_p95_ms``, ``device_memory_mb``, ...)."""
    w = state.workload
    spec = w.spec
    serve = spec.serve
    tune = serve.tune
    out: dict[str, Any] = {
        "profile": str(state.profile),
        "measured_profile": str(state.measured),  # what profile measure writes (and calibrate reads)
        "plan": str(state.plan),
        "state_dir": str(state.root / "server"),  # serve's: what the server keeps across restarts
        "models": str(state.models_config()),
        "validation": w.validation(),
        "name": spec.name,
        "profile_name": spec.name,  # profile measure's
        "devices": spec.devices.count,
        "device_memory_mb": spec.devices.memory_mb,
        "slo_p95_ms": spec.slo.p95_ms,
        "slo_accuracy": spec.slo.accuracy,
        "max_qps": spec.max_qps if spec.max_qps is not None else _trace_peak(w.trace()),
        "trace": w.trace(),
        "qps_dist": f"trace:{w.trace()}" if spec.trace else None,
        "batch_sizes": spec.profile.batch_sizes,
        "repeats": spec.profile.repeats,
        "warmup": spec.profile.warmup,
        "threads": spec.profile.threads,
        "limit": spec.profile.limit,
        "ranges": spec.plan.ranges,
        "max_busy": spec.plan.max_busy,
        "votes": spec.plan.votes,
        "seed": spec.plan.seed,
        "host": serve.host,
        "port": serve.port,
        "url": f"http://{serve.host}:{serve.port}",
        "batching": serve.batching,
        "cache_size": serve.cache_size,
        "tune": bool(tune),
        "replan": serve.replan,
        "admin_token": os.environ.get(serve.admin_token_env) if serve.admin_token_env else None,
        "auth_token": os.environ.get(serve.auth_token_env) if serve.auth_token_env else None,
    }
    if not isinstance(tune, bool):
        out.update(tune_target=tune.target, tune_budget=tune.budget, tune_reference=tune.reference)
    return {k: v for k, v in out.items() if v is not None}


def _trace_peak(spec: str | None) -> float | None:
    """The busiest second of the workload's trace: the highest QPS to plan for when ``max_qps`` is not given."""
    if spec is None:
        return None
    from cascadeserve.traces import build_trace

    return float(build_trace(spec).max_qps)
