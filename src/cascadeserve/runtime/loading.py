"""Model loading: from ``module:factory`` references in a YAML config, or from plain callables.

A model is any callable ``scores = f(batch)`` mapping a batch ``[n, ...]`` to per-class scores ``[n, classes]``.
In a config file it is named by ``module:factory``; the factory is called (with ``kwargs`` if given) and must
return such a callable. Adapters for torch, onnx and Hugging Face models come with the real-models issue and
will plug in here as more factories. A config looks like::

    input: {name: input, datatype: FP32, shape: [-1, 4]}   # what clients send (default: sample_id INT64 [-1])
    certainty: margin                                      # or max_probability, negative_entropy
    labels: [setosa, versicolor, virginica]                # optional: each label's class name, for the answers
    models:
      m0: mypkg.models:make_small
      m1: {factory: mypkg.models:make_large, kwargs: {width: 256}}

A ``models:`` *list* instead is a :mod:`cascadeserve.models` adapter config (see :func:`_adapter_config`). Either
form is read and validated by :mod:`cascadeserve.models.config`, the one reader of the file; this module turns it
into callables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cascadeserve.errors import CascadeServeError
from cascadeserve.runtime.device import ModelFn

if TYPE_CHECKING:  # the models package (and its frameworks) loads only when a config file is read
    from cascadeserve.models.config import ModelsConfig

__all__ = ["InputSpec", "ModelConfig", "load_model", "load_model_config"]


@dataclass(frozen=True)
class InputSpec:
    """The one input tensor clients send: its V2 name, datatype and shape (first dimension: the batch)."""

    name: str = "sample_id"
    datatype: str = "INT64"
    shape: tuple[int, ...] = (-1,)
    allow_non_finite: bool = False  # NaN/Inf in a float input: refused (400) unless the model says it copes


@dataclass(frozen=True)
class ModelConfig:
    models: Mapping[str, ModelFn]
    input: InputSpec = field(default_factory=InputSpec)
    certainty: str = "margin"
    # the second and later input tensors of models that take several (each row then reaches them as a mapping)
    more_inputs: tuple[InputSpec, ...] = ()
    # the file's ``labels:``, each integer label's class name: the runtime never reads them, the front ends answer
    # with them (the V2 output class_name)
    labels: Mapping[int, str] | None = None

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """Every input tensor clients send, in order."""
        return (self.input, *self.more_inputs)


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
    """Read a models config file (either form, validated by :func:`cascadeserve.models.config.load_models_file`,
    the one reader of the file), import every factory, and name the key of any problem."""
    from cascadeserve.models.config import FactoryModelsConfig, load_models_file  # deferred, like every models import

    cfg = load_models_file(path)
    if not isinstance(cfg, FactoryModelsConfig):
        return _adapter_config(cfg)
    models = {name: load_model(ref.factory, ref.kwargs) for name, ref in cfg.models.items()}
    spec = InputSpec() if cfg.input is None else _input_spec(cfg.input)
    return ModelConfig(models, spec, cfg.certainty, labels=cfg.label_names)


def factory_of(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (for messages)."""
    return f"{fn.__module__}:{fn.__qualname__}"


def _adapter_config(cfg: ModelsConfig) -> ModelConfig:
    """Hook for the real-models issue: a ``models:`` *list* is a :mod:`cascadeserve.models` config (name, adapter,
    ref, preprocessing per model). Its adapters are built and loaded here, so a model that fails names itself."""
    adapters = cfg.build()
    for adapter in adapters.values():
        adapter.load()
    first, *more = (_input_spec(i) for i in cfg.input_list)
    return ModelConfig(dict(adapters), first, cfg.certainty, tuple(more), cfg.label_names)


def _input_spec(cfg: Any) -> InputSpec:
    """The runtime's view of a validated ``input:`` section (:class:`cascadeserve.models.config.InputConfig`)."""
    return InputSpec(cfg.name, cfg.datatype, tuple(cfg.shape), cfg.allow_non_finite)
