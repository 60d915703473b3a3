"""Model loading: from ``module:factory`` references in a YAML config, or from plain callables.

A model is any callable ``scores = f(batch)`` mapping a batch ``[n, ...]`` to per-class scores ``[n, classes]``.
In a config file it is named by ``module:factory``; the factory is called (with ``kwargs`` if given) and must
return such a callable. Adapters for torch, onnx and Hugging Face models come with the real-models issue and
will plug in here as more factories. A config looks like::

    input: {name: input, datatype: FP32, shape: [-1, 4]}   # what clients send (default: sample_id INT64 [-1])
    certainty: margin                                      # or max_probability, negative_entropy
    models:
      m0: mypkg.models:make_small
      m1: {factory: mypkg.models:make_large, kwargs: {width: 256}}

A ``models:`` *list* instead is a :mod:`cascadeserve.models` adapter config (see :func:`_adapter_config`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cascadeserve.errors import CascadeServeError
from cascadeserve.runtime.device import ModelFn

__all__ = ["InputSpec", "ModelConfig", "load_model", "load_model_config"]

_DATATYPES = ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "FP16", "FP32", "FP64")


@dataclass(frozen=True)
class InputSpec:
    """The one input tensor clients send: its V2 name, datatype and shape (first dimension: the batch)."""

    name: str = "sample_id"
    datatype: str = "INT64"
    shape: tuple[int, ...] = (-1,)


@dataclass(frozen=True)
class ModelConfig:
    models: Mapping[str, ModelFn]
    input: InputSpec = field(default_factory=InputSpec)
    certainty: str = "margin"


def load_model(ref: str | ModelFn, kwargs: Mapping[str, Any] | None = None) -> ModelFn:
    """A callable as is, or ``module:factory`` imported and called."""
    if callable(ref):
        return ref
    from cascadeserve.models.config import resolve  # deferred, like every models import here

    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise CascadeServeError(f"model reference {ref!r} must look like 'package.module:factory'")
    factory = resolve(ref, what="model reference")
    model = factory(**dict(kwargs or {}))
    if not callable(model):
        raise CascadeServeError(f"model reference {ref!r}: the factory returned {type(model).__name__}, not a callable")
    return model  # type: ignore[no-any-return]


def load_model_config(path: str | Path) -> ModelConfig:
    """Read a models config file, import every factory, and name the key of any problem."""
    from cascadeserve.models.config import read_models_yaml

    p = Path(path)
    raw = read_models_yaml(p)
    if isinstance(raw, dict) and isinstance(raw.get("models"), list):
        return _adapter_config(p)
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict) or not raw["models"]:
        raise CascadeServeError(f"{p}: expected a mapping with a non-empty 'models' mapping")
    models: dict[str, ModelFn] = {}
    for name, entry in raw["models"].items():
        if isinstance(entry, str):
            models[str(name)] = load_model(entry)
        elif isinstance(entry, dict) and isinstance(entry.get("factory"), str):
            models[str(name)] = load_model(entry["factory"], entry.get("kwargs") or {})
        else:
            raise CascadeServeError(f"{p}: models.{name}: expected 'module:factory' or {{factory: ..., kwargs: ...}}")
    spec = InputSpec()
    if "input" in raw:
        inp = raw["input"]
        if not isinstance(inp, dict):
            raise CascadeServeError(f"{p}: input: expected a mapping with name, datatype and shape")
        dt = str(inp.get("datatype", "FP32")).upper()
        if dt not in _DATATYPES:
            raise CascadeServeError(f"{p}: input.datatype: {dt!r} is not one of {', '.join(_DATATYPES)}")
        shape = inp.get("shape", [-1])
        if not isinstance(shape, list) or not shape or not all(isinstance(s, int) for s in shape):
            raise CascadeServeError(f"{p}: input.shape: expected a list of integers such as [-1, 4]")
        spec = InputSpec(str(inp.get("name", "input")), dt, tuple(shape))
    return ModelConfig(models, spec, str(raw.get("certainty", "margin")))


def factory_of(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (for messages)."""
    return f"{fn.__module__}:{fn.__qualname__}"


def _adapter_config(path: Path) -> ModelConfig:
    """Hook for the real-models issue: a ``models:`` *list* is a :mod:`cascadeserve.models` config (name, adapter,
    ref, preprocessing per model). Its adapters are built and loaded here, so a model that fails names itself."""
    from cascadeserve.models import load_models_config  # deferred: frameworks load only when such a file is used

    cfg = load_models_config(path)
    adapters = cfg.build()
    for adapter in adapters.values():
        adapter.load()
    spec = InputSpec(cfg.input.name, cfg.input.datatype, tuple(cfg.input.shape))
    return ModelConfig(dict(adapters), spec, cfg.certainty)
