"""``serve``'s option checks that need no plan: the bounds, the cost watch, the fault-injection schedule, the
bind address. Each bad value is one line naming the option (exit code 2)."""

from __future__ import annotations

import ipaddress
import math
import os
import shutil
import time
from pathlib import Path

from cascadeserve.errors import CascadeServeError
from cascadeserve.policy.costs import CostSettings
from cascadeserve.profile import record_costs
from cascadeserve.profile.slowdown import Slowdown, Slowdowns

__all__ = ["check_options", "cost_settings", "loopback", "record_costs_in", "slowdowns", "thread_note"]


def thread_note(models: Path, devices: int) -> str | None:
    """A warning when the plan's devices would ask for more intra-op threads than this host has cores (the models
    config's ``threads``; see :meth:`cascadeserve.models.config.ModelsConfig.oversubscription`)."""
    from cascadeserve.models.config import ModelsConfig, load_models_file  # deferred: the models package

    cfg = load_models_file(models)
    if not isinstance(cfg, ModelsConfig):
        return None
    note = cfg.oversubscription(devices, os.cpu_count() or 1)
    return None if note is None else f"warning: {models}: {note}"


def cost_settings(tolerance: float, window_s: float) -> CostSettings:
    """``--cost-tolerance`` and ``--cost-window-s`` as the cost watch's settings (sustained for half a window)."""
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise CascadeServeError(f"--cost-tolerance: {tolerance} must be a positive number")
    if not (window_s > 0 and math.isfinite(window_s)):
        raise CascadeServeError(f"--cost-window-s: {window_s} must be a positive number of seconds")
    return CostSettings(tolerance=tolerance, window_s=window_s, sustain_s=window_s / 2, cooldown_s=3 * window_s)


def slowdowns(specs: list[str]) -> Slowdowns | None:
    """``--slowdown`` specs as a schedule counted from now (the server's start-up)."""
    steps = []
    for spec in specs:
        try:
            steps.append(Slowdown.parse(spec))
        except ValueError as e:
            raise CascadeServeError(f"--slowdown: {e}") from None
    return Slowdowns.of(*steps).shifted(time.monotonic()) if steps else None


def check_options(
    max_in_flight: int,
    max_wait_slos: float,
    capacity_qps: float | None,
    slo_ms: float | None,
    timeout_ms: float | None,
    max_body_bytes: int,
    grace_s: float,
) -> None:
    if max_in_flight < 1:
        raise CascadeServeError(f"--max-in-flight: {max_in_flight} must be at least 1")
    if not max_wait_slos >= 0:
        raise CascadeServeError(f"--max-wait-slos: {max_wait_slos} must be 0 (off) or positive")
    for opt, v in (("--capacity-qps", capacity_qps), ("--slo-p95-ms", slo_ms), ("--timeout-ms", timeout_ms)):
        if v is not None and not (v > 0 and v < float("inf")):
            raise CascadeServeError(f"{opt}: {v} must be a positive number")
    if max_body_bytes < 1:
        raise CascadeServeError(f"--max-body-bytes: {max_body_bytes} must be positive")
    if not grace_s >= 0:
        raise CascadeServeError(f"--grace-s: {grace_s} must not be negative")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def record_costs_in(source: Path, out: Path, costs: dict[str, float]) -> Path:
    """``serve --emulate --out DIR``: the profile folder ``source`` copied to ``out`` (unless they are one) with the
    measured serving ``costs`` recorded in its ``profile.yaml``; returns that file."""
    try:
        if out.resolve() != source.resolve():
            shutil.copytree(source, out, dirs_exist_ok=True)
        return record_costs(out, **costs)
    except OSError as e:
        raise CascadeServeError(f"--out: cannot write {out} ({e.strerror or e})") from None
