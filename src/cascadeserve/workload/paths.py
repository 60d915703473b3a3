"""What a workload file names must exist on this host before any work starts: its files and its device kind.

The schema checks a workload's shape; it cannot tell that ``validation: data/val.csv`` is missing, or that
``devices.kind: cuda`` names a GPU this host does not have. Found late, such a mistake costs a profile (minutes)
before the first error, or never shows at all (``workload check`` said "ok" for a validation file that did not
exist; ``kind: gpu`` was accepted on a host without one). :func:`check_workload_paths` says it at once, as one line
naming the file, the line and the field (:class:`~cascadeserve.errors.CascadeServeError`, exit code 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from cascadeserve.errors import CascadeServeError
from cascadeserve.workload.loader import LoadedWorkload, line_of

__all__ = ["GPU_KINDS", "check_workload_paths", "host_has_gpu"]

GPU_KINDS = frozenset({"gpu", "cuda", "nvidia"})  # device kinds that need an NVIDIA GPU on the serving host
_BUILT_IN = ("digits", "tweets")  # validation sets the package provides by name


def host_has_gpu() -> bool:
    """Whether this host has an NVIDIA GPU the driver exposes (its device files), without importing a framework."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def check_workload_paths(workload: LoadedWorkload, *, serving_here: bool = True) -> None:
    """Raise on the first file the workload names that is missing, or on a GPU device kind on a host without one
    (only when ``serving_here``: a plan may be made on one host for another)."""
    spec = workload.spec
    node = _node(workload.path)

    def fail(loc: tuple[str, ...], message: str) -> None:
        raise CascadeServeError(f"{workload.path}:{line_of(node, loc)}: {'.'.join(loc)}: {message}")

    v = spec.validation
    name, _, folder = v.partition(":")
    if name in _BUILT_IN and not (workload.base_dir / v).exists():
        if folder and not workload.resolve(folder).is_dir():
            fail(("validation",), f"no folder {folder!r} (resolved against {workload.base_dir})")
    elif not workload.resolve(v).is_file():
        fail(("validation",), f"no file {v!r} (resolved against {workload.base_dir}; built-in sets: digits, tweets)")
    if isinstance(spec.models, str) and not workload.resolve(spec.models).is_file():
        fail(("models",), f"no models config {spec.models!r} (resolved against {workload.base_dir})")
    trace = spec.trace
    if trace is not None and not trace.startswith("synthetic:") and not workload.resolve(trace).is_file():
        fail(("trace",), f"no trace file {trace!r} (resolved against {workload.base_dir}; or synthetic:...)")
    for folder in spec.pythonpath:
        if not workload.resolve(folder).is_dir():
            fail(("pythonpath",), f"no folder {folder!r} (resolved against {workload.base_dir})")
    if serving_here and spec.devices.kind.lower() in GPU_KINDS and not host_has_gpu():
        fail(
            ("devices", "kind"),
            f"{spec.devices.kind!r} needs a GPU and this host has none (no /dev/nvidia*); "
            "use kind: cpu here, or run this where the GPU is",
        )


def _node(path: Path) -> yaml.Node | None:
    try:
        return yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):  # load_workload read it a moment ago; without lines the message still holds
        return None
