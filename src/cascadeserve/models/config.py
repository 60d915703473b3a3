"""The models config file: which models a family has, and how to build each one.

::

    certainty: margin                                     # how scores become certainty (profile and runtime)
    threads: 1                                            # intra-op threads per model (recorded in the profile)
    input: {name: input, datatype: FP32, shape: [-1, 64]} # what HTTP clients send (``cascadeserve serve``)
    models:
      - name: logreg
        adapter: torch                                    # callable | torch | sklearn | onnx | hf | llm | upstream
        ref: cascadeserve.models.families.digits:load     # module:factory (called with kwargs), or a file path
        kwargs: {arch: logreg}
        memory_mb: 0.2                                    # optional hint; overrides what the profiler measures
        preprocess: {dtype: float32, scale: 0.0625, reshape: [1, 8, 8]}
      - name: big
        adapter: onnx
        ref: big.onnx                                     # relative paths are relative to this file
        options: {output: 0}                              # adapter-specific keyword arguments
      - name: remote
        adapter: upstream                                 # an OpenAI-compatible server (models/upstream.py)
        ref: http://127.0.0.1:8000                        # its base URL
        options: {model: my-llm, api_key_env: UPSTREAM_KEY, max_concurrency: 8}

``labels`` names the classes the models predict, by integer label: a list (``labels: [negative, neutral,
positive]``: label 0 is ``negative``) or a mapping (``labels: {0: negative, 2: positive}``). Served answers then
carry each row's class name beside its label (the V2 output ``class_name``); the names must be non-empty and
distinct, and ``serve`` checks that they cover every class in the profile's labels and predictions.

A model that takes several input tensors (a tokenised text model: ``input_ids`` and ``attention_mask``) lists them
under ``inputs`` instead of ``input``; each row then reaches the model as a mapping of name to array (the ONNX
adapter feeds it by input name, the torch adapter as keyword arguments)::

    inputs:
      - {name: input_ids, datatype: INT64, shape: [-1, 64]}
      - {name: attention_mask, datatype: INT64, shape: [-1, 64]}

A ``ref`` of the form ``package.module:factory`` is imported and called with ``kwargs``; what it returns is
handed to the adapter (a module, an estimator, a callable, or a path for onnx/hf). Anything else is a path.
The file is validated with pydantic, and every error names the file and the field (``models[1].adapter``) and,
where known, the model; a model that fails to build names the model and the reason.

``cascadeserve serve`` also takes the older *factory* form, where ``models:`` is a mapping from each name to a
``module:factory`` that returns a ``scores = f(batch)`` callable (:class:`FactoryModelsConfig`)::

    input: {name: input, datatype: FP32, shape: [-1, 4]}  # default: clients send sample_id INT64 [-1]
    certainty: margin
    models:
      m0: mypkg.models:make_small
      m1: {factory: mypkg.models:make_large, kwargs: {width: 256}}

This module is the one reader of the file in either form (:func:`load_models_file`): the runtime's
``load_model_config`` and the Ray backend's ``model_sources`` both read it here.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from cascadeserve.errors import CascadeServeError, yaml_problem
from cascadeserve.models.adapters import (
    Adapter,
    CallableAdapter,
    HFAdapter,
    OnnxAdapter,
    SklearnAdapter,
    TorchAdapter,
)
from cascadeserve.models.base import ModelLoadError
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.upstream import UpstreamAdapter

__all__ = [
    "FactoryModelsConfig",
    "FactoryRef",
    "InputConfig",
    "ModelSpec",
    "ModelsConfig",
    "Preprocess",
    "build_model",
    "load_models_config",
    "load_models_file",
    "read_models_yaml",
    "resolve",
]

Hook = Callable[[Any], Any]
_C = TypeVar("_C", bound=BaseModel)
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
# adapters whose frameworks run intra-op thread teams (scikit-learn and callables run on the calling thread; an
# upstream runs elsewhere)
_THREADED = frozenset({"torch", "onnx", "hf", "llm"})
# every V2 datatype (cascadeserve.http.v2.DTYPES, which this layer may not import; a test keeps the two equal)
_DATATYPES = (
    "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16", "FP32", "FP64", "BF16",
    "BYTES",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Preprocess(_Strict):
    """Built-in preprocessing, applied in this order: ``function``, ``dtype``, ``scale``, ``reshape``."""

    function: str | None = None  # module:callable, batch -> batch
    dtype: Literal["float32", "float64", "int64", "int32"] | None = None
    scale: float | None = None
    reshape: list[int] | None = None  # per-sample shape; the batch dimension is kept

    @field_validator("function")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        if v is not None and not _REF.match(v):
            raise ValueError(f"{v!r} must look like 'package.module:function'")
        return v


class InputConfig(_Strict):
    """What HTTP and gRPC clients send: ``BYTES`` for raw text (each row a UTF-8 string), a numeric type otherwise;
    any V2 datatype (BOOL, INT8/16/32/64, UINT8/16/32/64, FP16/32/64, BF16, BYTES). The model adapter receives
    each row as numpy of that datatype, except BF16, which numpy lacks: its rows are ``np.uint16`` holding the
    bfloat16 bit patterns (JSON numbers rounded to the nearest bfloat16, round to nearest even on the float32
    bits); ``(x.astype(np.uint32) << 16).view(np.float32)`` gives the values. The first dimension is the batch
    (``-1``); the others are fixed positive sizes. ``allow_non_finite``: the model copes with NaN/Inf in a float
    input, BF16 included (default: such a row is refused with 400 naming the input)."""

    name: str = Field(default="input", min_length=1)
    datatype: str = Field(default="FP32", description=f"One of {', '.join(_DATATYPES)} (any case)")
    shape: list[int] = Field(default_factory=lambda: [-1])
    allow_non_finite: bool = False

    @field_validator("datatype")
    @classmethod
    def _dt(cls, v: str) -> str:
        if v.upper() not in _DATATYPES:
            raise ValueError(f"{v!r} is not one of {', '.join(_DATATYPES)}")
        return v.upper()

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int]) -> list[int]:
        if not v or v[0] != -1:
            raise ValueError(f"{v}: the first dimension is the batch and must be -1")
        bad = [s for s in v[1:] if s < 1]
        if bad:
            raise ValueError(f"{v}: every dimension after the batch must be a positive size (got {bad[0]})")
        return v


def _label_names(v: Any) -> Any:
    """``labels:`` checked (a list, or a mapping of non-negative integer labels; non-empty, distinct names)."""
    if v is None:
        return v
    if isinstance(v, dict):  # a key written "0" (JSON) is the label 0, as YAML's 0 is
        pairs = [(int(k) if isinstance(k, str) and k.isdigit() else k, n) for k, n in v.items()]
    elif isinstance(v, list):
        pairs = list(enumerate(v))
    else:
        raise ValueError("expected a list of class names (label 0 first) or a mapping of label to class name")
    if not pairs:
        raise ValueError("no class names: give one per label, or leave 'labels' out")
    for k, n in pairs:
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"{k!r} is not a label (labels are non-negative integers)")
        if not isinstance(n, str) or not n.strip():
            raise ValueError(f"label {k}: the class name must be a non-empty string, got {n!r}")
    names = [n for _, n in pairs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate class names: {', '.join(dupes)}")
    return dict(pairs) if isinstance(v, dict) else v


LabelNames = Annotated[
    list[str] | dict[int, str] | None,
    BeforeValidator(_label_names),
    Field(description="Class names by integer label: a list (label 0 first) or a mapping of label to name."),
]


class ModelSpec(_Strict):
    name: str = Field(min_length=1, pattern=r"^[^/.][^/]*$")
    adapter: Literal["callable", "torch", "sklearn", "onnx", "hf", "llm", "upstream"]
    ref: str = Field(min_length=1)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    memory_mb: float | None = Field(default=None, ge=0)
    device: str = "cpu"
    threads: int | None = Field(default=None, ge=1)
    preprocess: Preprocess | None = None
    postprocess: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    # module:callable, raw inputs -> token count per input: a model whose batch is padded to its longest input (a
    # text encoder) is then profiled and priced by that longest input, as an LLM stage is (profile/tokens.py)
    tokens: str | None = None


class ModelsConfig(_Strict):
    models: list[ModelSpec] = Field(min_length=1)
    certainty: str = "margin"
    threads: int | None = Field(default=None, ge=1)
    input: InputConfig = Field(default_factory=InputConfig)
    # several input tensors (instead of ``input``): each row reaches the models as a mapping of name to array
    inputs: list[InputConfig] | None = Field(default=None, min_length=1)
    labels: LabelNames = None
    path: Path | None = None  # where it was read from (relative refs resolve against its folder)

    @field_validator("models")
    @classmethod
    def _unique(cls, v: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate model names: {', '.join(dupes)}")
        return v

    @field_validator("inputs")
    @classmethod
    def _unique_inputs(cls, v: list[InputConfig] | None) -> list[InputConfig] | None:
        names = [i.name for i in v or ()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate input names: {', '.join(dupes)}")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> ModelsConfig:
        if self.inputs is not None and "input" in self.model_fields_set:
            raise ValueError("give 'input' (one tensor) or 'inputs' (several), not both")
        return self

    @property
    def input_list(self) -> list[InputConfig]:
        """Every input tensor clients send, in order (the one ``input``, or ``inputs``)."""
        return list(self.inputs) if self.inputs is not None else [self.input]

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()

    @property
    def label_names(self) -> dict[int, str] | None:
        """The class name of each integer label (``labels:``), or ``None`` when the file names none."""
        return _by_label(self.labels)

    def build(self) -> dict[str, Adapter]:
        """One (not yet loaded) adapter per model, in the config's order."""
        return {m.name: build_model(m, self.base_dir, default_threads=self.threads) for m in self.models}

    def oversubscription(self, devices: int, cores: int) -> str | None:
        """A warning when ``devices`` CPU devices, each running its largest threaded model at once, ask for more
        intra-op threads than the host has ``cores``; ``None`` when they fit.

        Why it matters: two torch thread teams on shared cores spin-wait on each other, so a batch runs up to
        2.6× slower while the other device is busy than alone (SmolLM2 at batch 1, 2 devices × 2 threads on 2
        cores), more at small batches than large: no profile of each model alone, nor one busy factor per model,
        describes that. With one thread per core the same batches ran ×0.9–1.06 busy against alone
        (``benchmarks/RESULTS.md``, contention per batch size)."""
        threaded = [m for m in self.models if m.adapter in _THREADED and m.device == "cpu"]
        if not threaded or devices < 1:
            return None
        # torch and ONNX Runtime default to one thread per core when none is set
        per_device = max((m.threads or self.threads or cores) for m in threaded)
        if per_device * devices <= cores:
            return None
        fit = max(1, cores // devices)
        return (
            f"{devices} devices × {per_device} intra-op threads ask for {per_device * devices} threads on "
            f"{cores} cores: batches slow each other more than any profile says; set 'threads: {fit}' in the "
            "models config (and profile with it)"
        )


class FactoryRef(_Strict):
    """One model of the factory form: ``package.module:factory``, called with ``kwargs``."""

    factory: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("factory")
    @classmethod
    def _ref(cls, v: str) -> str:
        if not _REF.match(v):
            raise ValueError(f"{v!r} must look like 'package.module:factory'")
        return v


class FactoryModelsConfig(_Strict):
    """The factory form of the file: ``models`` maps each name to a :class:`FactoryRef` (or just its string)."""

    models: dict[str, FactoryRef] = Field(min_length=1)
    certainty: str = "margin"
    input: InputConfig | None = None  # None: clients send sample ids (the runtime's default input)
    labels: LabelNames = None
    path: Path | None = None

    @property
    def label_names(self) -> dict[int, str] | None:
        """The class name of each integer label (``labels:``), or ``None`` when the file names none."""
        return _by_label(self.labels)

    @field_validator("models", mode="before")
    @classmethod
    def _plain_refs(cls, v: Any) -> Any:
        if isinstance(v, dict):  # ``m0: pkg.mod:make`` is short for ``m0: {factory: pkg.mod:make}``
            return {str(k): {"factory": e} if isinstance(e, str) else e for k, e in v.items()}
        return v


def _by_label(labels: list[str] | dict[int, str] | None) -> dict[int, str] | None:
    return None if labels is None else dict(labels) if isinstance(labels, dict) else dict(enumerate(labels))


def _where(loc: tuple[int | str, ...], raw: Any) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(str(item))
    text = ".".join(parts)
    if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int) and isinstance(raw, dict):
        try:
            name = raw["models"][loc[1]].get("name")
        except (AttributeError, IndexError, KeyError, TypeError):
            name = None
        if name:
            text += f" (model {name!r})"
    return text


def read_models_yaml(path: Path) -> Any:
    """The parsed YAML of a models config file (either format); unreadable or invalid files name the file."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CascadeServeError(f"{path}: cannot read the models config: {e.strerror}") from None
    except yaml.YAMLError as e:  # file and line, never the line's text (it may hold a secret)
        line, column, problem = yaml_problem(e)
        where = "" if line is None else f"{line}:{column}:"
        raise CascadeServeError(f"{path}:{where} invalid YAML: {problem}") from None


def load_models_config(path: str | Path) -> ModelsConfig:
    """Read and validate a models config (the adapter form, a ``models`` list); errors name the file and field."""
    p = Path(path)
    return _validated(ModelsConfig, read_models_yaml(p), p)


def load_models_file(path: str | Path) -> ModelsConfig | FactoryModelsConfig:
    """Read and validate a models config in either form: a ``models`` mapping is the factory form, anything else
    must be the adapter form. Errors name the file and the field."""
    p = Path(path)
    raw = read_models_yaml(p)
    if isinstance(raw, dict) and isinstance(raw.get("models"), dict):
        return _validated(FactoryModelsConfig, raw, p)
    return _validated(ModelsConfig, raw, p)


def _validated(schema: type[_C], raw: Any, p: Path) -> _C:
    if not isinstance(raw, dict):
        raise CascadeServeError(f"{p}: expected a mapping with a 'models' list")
    try:
        return schema.model_validate({**raw, "path": p})
    except ValidationError as e:
        first = e.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise CascadeServeError(f"{p}: {_where(first['loc'], raw) or 'the file'}: {msg}{more}") from None


def resolve(ref: str, *, what: str = "reference") -> Callable[..., Any]:
    """Import ``package.module:attr`` and return the attribute (which must be callable)."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelLoadError(f"{what} {ref!r}: cannot import {module_name!r}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise ModelLoadError(f"{what} {ref!r}: {module_name!r} has no callable {attr!r}")
    return obj  # type: ignore[no-any-return]


def _preprocess(spec: Preprocess | None, model: str) -> Callable[[Any], Any] | None:
    if spec is None:
        return None
    fn = resolve(spec.function, what=f"model {model!r}: preprocess.function") if spec.function else None

    def pre(batch: Any) -> Any:
        x = fn(batch) if fn is not None else batch
        if spec.dtype is None and spec.scale is None and spec.reshape is None:
            return x
        arr = np.asarray(x, dtype=spec.dtype) if spec.dtype else np.asarray(x)
        if spec.scale is not None:
            arr = arr * np.asarray(spec.scale, dtype=arr.dtype if arr.dtype.kind == "f" else np.float64)
        if spec.reshape is not None:
            arr = arr.reshape(len(arr), *spec.reshape)
        return arr

    return pre


def build_model(spec: ModelSpec, base_dir: Path | None = None, *, default_threads: int | None = None) -> Adapter:
    """The adapter for one config entry; the factory (if any) runs at ``load()``, so building is cheap."""
    base = base_dir or Path.cwd()
    name = spec.name
    threads = spec.threads if spec.threads is not None else default_threads
    pre = _preprocess(spec.preprocess, name)
    post = resolve(spec.postprocess, what=f"model {name!r}: postprocess") if spec.postprocess else None
    is_ref = bool(_REF.match(spec.ref))
    path = None if is_ref else (Path(spec.ref) if Path(spec.ref).is_absolute() else base / spec.ref)

    def made() -> Any:
        factory = resolve(spec.ref, what=f"model {name!r}: ref")
        return factory(**spec.kwargs)

    def as_path() -> Path:
        if path is not None:
            return path
        out = made()
        if not isinstance(out, str | Path):
            raise ModelLoadError(f"model {name!r}: the factory {spec.ref!r} must return a path for {spec.adapter}")
        return Path(out)

    opts = dict(spec.options)
    try:
        if spec.adapter == "callable":
            if path is not None:
                raise ModelLoadError(f"model {name!r}: a callable model needs ref 'package.module:factory'")
            return CallableAdapter(name, loader=made, preprocess=pre, postprocess=post)
        if spec.adapter == "torch":
            return TorchAdapter(
                name,
                loader=made if is_ref else None,
                path=path,
                device=spec.device,
                threads=threads,
                preprocess=pre,
                postprocess=post,
            )
        if spec.adapter == "sklearn":
            return SklearnAdapter(name, loader=made if is_ref else None, path=path, preprocess=pre, postprocess=post)
        if spec.adapter == "llm":  # scores option items; pre/postprocess hooks do not apply to prompts
            if spec.preprocess is not None or spec.postprocess is not None:
                raise ModelLoadError(f"model {name!r}: an llm model takes no preprocess or postprocess")
            return LLMAdapter(
                name, path, loader=as_path if is_ref else None, device=spec.device, threads=threads, **opts
            )
        if spec.adapter == "upstream":  # ref: the server's base URL (models/upstream.py)
            if spec.preprocess is not None or spec.postprocess is not None:
                raise ModelLoadError(f"model {name!r}: an upstream model takes no preprocess or postprocess")
            base_url = str(opts.pop("base_url", spec.ref))
            return UpstreamAdapter(name, base_url, str(opts.pop("model", "")), **opts)
        if spec.adapter == "onnx":
            return _Deferred(name, lambda: OnnxAdapter(name, as_path(), threads=threads, **opts), pre, post)
        return _Deferred(
            name, lambda: HFAdapter(name, as_path(), device=spec.device, threads=threads, **opts), pre, post
        )
    except TypeError as e:  # unknown option for the adapter
        raise ModelLoadError(f"model {name!r}: bad options for adapter {spec.adapter!r}: {e}") from None


class _Deferred(Adapter):
    """An adapter whose path is known only after a factory runs (at ``load()``)."""

    def __init__(self, name: str, make: Callable[[], Adapter], pre: Hook | None, post: Hook | None) -> None:
        super().__init__(name, preprocess=pre, postprocess=post)
        self._make = make
        self.inner: Adapter | None = None

    @property
    def framework(self) -> str:  # type: ignore[override]
        return self.inner.framework if self.inner is not None else "deferred"

    def _load(self) -> None:
        try:
            inner = self._make()
        except TypeError as e:
            raise ModelLoadError(f"model {self.name!r}: bad options: {e}") from None
        inner.load()
        self.inner = inner

    def _run(self, x: Any) -> Any:
        assert self.inner is not None
        return self.inner._run(x)

    def memory_mb(self) -> float | None:
        return None if self.inner is None else self.inner.memory_mb()
