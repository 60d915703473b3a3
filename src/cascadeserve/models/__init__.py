"""Real models: framework adapters, the models config, validation data, and the profiler.

* :class:`Model` is the protocol (``load()``, ``predict(batch) -> scores[n, classes]``, ``memory_mb()``);
  :class:`CallableAdapter`, :class:`TorchAdapter`, :class:`SklearnAdapter`, :class:`OnnxAdapter` and
  :class:`HFAdapter` implement it. Frameworks are imported lazily; a missing one raises
  :class:`MissingExtraError` naming the extra to install.
* :func:`load_models_config` reads the YAML that names a family's models (``ModelsConfig.build()`` makes the
  adapters); ``cascadeserve serve --models`` reads the same file.
* :func:`load_validation` reads labelled validation data; :func:`measure` profiles a family into the profile
  interchange format (``cascadeserve profile measure``).
* :mod:`cascadeserve.models.families` holds the real families, ``digits``, ``tweets`` and the local LLMs (``llm``).
* LLM stages: :class:`LocalLLM` (``score``, ``generate`` -> :class:`Generation`) in :mod:`~cascadeserve.models.llm`,
  :class:`LLMAdapter` (the scoring adapter, ``adapter: llm`` in a config), the JSONL sets and prompts in
  :mod:`~cascadeserve.models.llm_prompts`, and their profiling in :mod:`~cascadeserve.models.llm_profile`.

Imports point one way (an import-linter layers contract keeps them so): ``profiler`` → ``config``, ``validation``
and ``llm_profile`` → ``families`` and ``llm_adapter`` → ``adapters``, ``llm`` and ``llm_prompts`` → ``dataset``
(:class:`ValidationSet`) and ``base``.
"""

from __future__ import annotations

from cascadeserve.models.adapters import (
    Adapter,
    CallableAdapter,
    HFAdapter,
    OnnxAdapter,
    SklearnAdapter,
    TorchAdapter,
)
from cascadeserve.models.base import MissingExtraError, Model, ModelLoadError, require
from cascadeserve.models.config import ModelsConfig, ModelSpec, Preprocess, build_model, load_models_config
from cascadeserve.models.dataset import ValidationDataError, ValidationSet
from cascadeserve.models.llm import Generation, LocalLLM
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.profiler import DEFAULT_BATCH_SIZES, MeasureOptions, ModelRecord, measure
from cascadeserve.models.validation import load_validation

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "Adapter",
    "CallableAdapter",
    "Generation",
    "HFAdapter",
    "LLMAdapter",
    "LocalLLM",
    "MeasureOptions",
    "MissingExtraError",
    "Model",
    "ModelLoadError",
    "ModelRecord",
    "ModelSpec",
    "ModelsConfig",
    "OnnxAdapter",
    "Preprocess",
    "SklearnAdapter",
    "TorchAdapter",
    "ValidationDataError",
    "ValidationSet",
    "build_model",
    "load_models_config",
    "load_validation",
    "measure",
    "require",
]
