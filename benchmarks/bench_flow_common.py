"""Helpers shared by the ``bench_flow_*`` scripts (percentiles, a small Ray start, the machine line)."""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def med(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at start"


def start_ray(object_store_mb: int = 200) -> Any:
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=object_store_mb << 20,
            _temp_dir=tempfile.mkdtemp(prefix="csflow", dir="/tmp"),
            log_to_driver=False,
            configure_logging=False,
        )
    return ray
